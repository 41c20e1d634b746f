//! The device allocator: all claims of one pod, on one node, with the semantics of
//! Kubernetes' structured allocator.
//!
//! Requests are satisfied in order, each by its first alternative that fits (`exactly` has
//! one); a device must pass its class's selectors and the request's, tolerate its taints,
//! offer the capacity asked for, be free (or have a share left, or be taken with admin
//! access), and keep the claim's constraints (matchAttribute, distinctAttribute). When a
//! later request cannot be met, earlier choices are revisited (backtracking), so a fit is
//! found whenever one exists, within a bounded number of steps. A selector that fails at
//! run time is an error for the pod, never a silent `false`.

use super::model::{AllocatedDevice, AllocationMode, ConstraintKind, DeviceIdx, DraSnapshot, SubRequest};
pub(crate) use super::resolved::origin_text;
pub use super::resolved::{AlternativeSelectors, ResolvedSpec, SelectorOrigin, UnusableAlternative};
use super::selectors::SelectorCache;
use super::state::DeviceState;
use crate::engine::node::NodeIdx;
use crate::quantity::Quantity;

/// The most devices one claim's allocation may hold (`AllocationResultsMaxSize`).
pub const MAX_RESULTS: usize = 32;
/// How far the device search may go, so that a claim whose selectors and constraints
/// force the worst case costs its own pod and nobody else's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchLimits {
    /// Steps for one pod on one node before the search gives up on that node.
    pub steps_per_node: u32,
    /// Steps for one pod over every node it tries in one cycle; then the pod waits for the
    /// next cycle.
    pub steps_per_pod: u32,
    /// Compiled selectors no cycle asked for in this many seconds are dropped.
    pub selector_idle_seconds: i64,
}

impl Default for SearchLimits {
    fn default() -> Self {
        SearchLimits { steps_per_node: 20_000, steps_per_pod: 200_000, selector_idle_seconds: 600 }
    }
}

/// Whether every taint that blocks allocation (NoSchedule, NoExecute) is tolerated.
fn tolerated(device: &super::model::Device, sub: &SubRequest) -> bool {
    device.taints.iter().all(|t| {
        t.effect == super::model::DeviceTaintEffect::None || sub.tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

/// One claim to allocate, as the pod names it.
pub struct ClaimToAllocate<'a> {
    pub label: &'a str,
    pub spec: &'a ResolvedSpec,
}

/// Why the claims cannot be allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Not on this node; the text says which claim and request ran short.
    Node(String),
    /// Not anywhere: an error the pod waits on (a selector that fails at run time).
    Pod(String),
    /// The search reached its step limit without a fit.
    GaveUp,
}

/// What the allocator reads and changes.
pub struct Allocator<'a> {
    pub dra: &'a DraSnapshot,
    pub selectors: &'a mut SelectorCache,
    pub state: &'a mut DeviceState,
}

struct Chosen {
    request: usize,
    alternative: usize,
    device: DeviceIdx,
    admin_access: bool,
    consumed: Option<Vec<(String, Quantity)>>,
}

struct Search<'s, 'a> {
    alloc: &'s mut Allocator<'a>,
    node: NodeIdx,
    claims: &'s [ClaimToAllocate<'s>],
    /// (claim, request) in the order they are satisfied.
    items: Vec<(usize, usize)>,
    /// Candidates per (claim, request, alternative), found once per search.
    candidates: Vec<Vec<Vec<Option<Vec<DeviceIdx>>>>>,
    /// Per (claim, request, alternative): matching devices left out for untolerated taints,
    /// so a rejection can say that the devices exist but are out of service.
    tainted: Vec<Vec<Vec<u32>>>,
    chosen: Vec<Vec<Chosen>>,
    steps: u32,
    limit: u32,
    /// The deepest item that ran short, for the node's rejection.
    short: Option<(usize, String)>,
    error: Option<String>,
}

/// The capacity a request takes a share of (a fraction's, or the first it names an amount
/// of), by which its devices are packed.
fn shared_capacity(sub: &SubRequest) -> Option<&str> {
    sub.fraction.as_ref().map(|f| f.capacity.as_str()).or_else(|| sub.capacity.first().map(|(name, _)| name.as_str()))
}

/// Allocates every claim on `node`, all or nothing, in at most `limit` steps (the steps
/// taken are added to `steps`); on success the devices are taken in the allocator's state
/// and returned per claim, in the order given.
pub fn allocate(
    alloc: &mut Allocator<'_>,
    node: NodeIdx,
    claims: &[ClaimToAllocate<'_>],
    limit: u32,
    steps: &mut u32,
) -> Result<Vec<Vec<AllocatedDevice>>, Failure> {
    let mark = alloc.state.mark();
    let mut items = Vec::new();
    let mut candidates = Vec::with_capacity(claims.len());
    let mut tainted = Vec::with_capacity(claims.len());
    for (c, claim) in claims.iter().enumerate() {
        let requests = &claim.spec.spec.requests;
        candidates.push(requests.iter().map(|r| vec![None; r.alternatives.len()]).collect());
        tainted.push(requests.iter().map(|r| vec![0; r.alternatives.len()]).collect());
        items.extend((0..requests.len()).map(|r| (c, r)));
    }
    let mut search = Search {
        alloc,
        node,
        claims,
        items,
        candidates,
        tainted,
        chosen: claims.iter().map(|_| Vec::new()).collect(),
        steps: 0,
        limit,
        short: None,
        error: None,
    };
    let solved = search.solve(0);
    *steps += search.steps;
    if solved {
        let chosen = std::mem::take(&mut search.chosen);
        return Ok(chosen
            .into_iter()
            .zip(claims)
            .map(|(devices, claim)| {
                devices
                    .into_iter()
                    .map(|c| AllocatedDevice {
                        request: claim.spec.spec.requests[c.request].alternatives[c.alternative].result_name.clone(),
                        device: c.device,
                        admin_access: c.admin_access,
                        consumed: c.consumed,
                    })
                    .collect()
            })
            .collect());
    }
    let (error, short, taken) = (search.error.take(), search.short.take(), search.steps);
    alloc.state.rollback(mark);
    if let Some(error) = error {
        return Err(Failure::Pod(error));
    }
    if taken >= limit {
        return Err(Failure::GaveUp);
    }
    Err(Failure::Node(short.map(|(_, why)| why).unwrap_or_else(|| "had no devices for the pod's claims".into())))
}

impl Search<'_, '_> {
    fn label(&self, c: usize, r: usize) -> String {
        format!("claim {} (request {})", self.claims[c].label, self.claims[c].spec.spec.requests[r].name)
    }

    fn ran_short(&mut self, item: usize, why: impl FnOnce() -> String) {
        if self.short.as_ref().is_none_or(|(deepest, _)| item >= *deepest) {
            self.short = Some((item, why()));
        }
    }

    fn solve(&mut self, item: usize) -> bool {
        if item == self.items.len() {
            return true;
        }
        let (c, r) = self.items[item];
        let alternatives = self.claims[c].spec.spec.requests[r].alternatives.len();
        for a in 0..alternatives {
            if self.error.is_some() || self.steps >= self.limit {
                return false;
            }
            let Some(candidates) = self.candidates_of(c, r, a) else { return false };
            let sub = &self.claims[c].spec.spec.requests[r].alternatives[a];
            let fits = match sub.mode {
                AllocationMode::ExactCount(n) => {
                    let shared = !sub.distinct
                        && candidates.iter().any(|&d| self.alloc.dra.devices[d as usize].allow_multiple_allocations);
                    if candidates.len() < n as usize && !shared {
                        let label = self.label(c, r);
                        let found = candidates.len();
                        let tainted = self.tainted_note(c, r, a);
                        self.ran_short(item, || match found {
                            0 => format!("had no device matching {label}{tainted}"),
                            _ => format!("had {found} of the {n} devices matching {label}{tainted}"),
                        });
                        false
                    } else {
                        self.pick(item, a, &candidates, n as usize, 0)
                    }
                }
                AllocationMode::All => self.take_all(item, a, &candidates),
            };
            if fits {
                return true;
            }
        }
        false
    }

    /// Devices on the node that pass the alternative's selectors, taints and capacity
    /// requests, whether taken or not; None after a selector error.
    fn candidates_of(&mut self, c: usize, r: usize, a: usize) -> Option<Vec<DeviceIdx>> {
        if let Some(found) = &self.candidates[c][r][a] {
            return Some(found.clone());
        }
        let dra = self.alloc.dra;
        let spec = self.claims[c].spec;
        let sub = &spec.spec.requests[r].alternatives[a];
        let ids = match &spec.selectors[r][a] {
            Ok(ids) => ids,
            // This alternative is unusable (its class is missing); the next one may do.
            Err(_) => {
                self.candidates[c][r][a] = Some(Vec::new());
                return Some(Vec::new());
            }
        };
        let mut found = Vec::new();
        let all_mode = sub.mode == AllocationMode::All;
        for &d in &dra.node_devices[self.node as usize] {
            // A pool being updated serves nothing until all its slices are there.
            if !dra.pool_of(d).complete {
                continue;
            }
            let device = &dra.devices[d as usize];
            let mut all = true;
            for &(id, origin) in ids {
                match self.alloc.selectors.matches(id, device) {
                    Ok(true) => {}
                    Ok(false) => {
                        all = false;
                        break;
                    }
                    Err(e) => {
                        self.error = Some(format!(
                            "{}: {}: CEL runtime error on device {}: {e}",
                            self.label(c, r),
                            origin_text(origin, &sub.class),
                            device.id()
                        ));
                        return None;
                    }
                }
            }
            if !all {
                continue;
            }
            // `All` takes every matching device or none: a tainted one fails it later.
            if !all_mode && !tolerated(device, sub) {
                self.tainted[c][r][a] += 1;
                continue;
            }
            let has_capacity = sub.capacity.iter().all(|(name, amount)| {
                device.capacity_index(name).is_some_and(|i| device.capacity[i].1.value >= *amount)
            });
            // A fraction is a share: only a device that allows several allocations has one.
            let shares = sub
                .fraction
                .as_ref()
                .is_none_or(|f| device.allow_multiple_allocations && device.capacity_index(&f.capacity).is_some());
            if has_capacity && shares {
                found.push(d);
            }
        }
        if let Some(name) = shared_capacity(sub)
            && found.iter().any(|&d| dra.devices[d as usize].allow_multiple_allocations)
        {
            // Best fit among shared devices: the one with the least of the capacity left
            // first, so partly shared devices fill before a fresh one is opened.
            let state = &*self.alloc.state;
            found.sort_by_cached_key(|&d| match dra.devices[d as usize].allow_multiple_allocations {
                true => state.left(dra, d, name),
                false => (true, Quantity::ZERO),
            });
        }
        // Devices of pools with binding conditions last: they are given only when no
        // device that is ready at once will do.
        if found.iter().any(|&d| dra.pool_of(d).binding_conditions) {
            found.sort_by_key(|&d| dra.pool_of(d).binding_conditions);
        }
        self.candidates[c][r][a] = Some(found.clone());
        Some(found)
    }

    /// How taking `d` for `sub` would hold it: exclusively (None) or as a share consuming
    /// these amounts; Err when it cannot be taken now.
    fn holding(&self, d: DeviceIdx, sub: &SubRequest) -> Result<Option<Vec<(usize, Quantity)>>, ()> {
        let dra = self.alloc.dra;
        let device = &dra.devices[d as usize];
        if !device.allow_multiple_allocations {
            let state = &*self.alloc.state;
            return if state.is_free(d) && state.counters_fit(dra, d) { Ok(None) } else { Err(()) };
        }
        let mut amounts = Vec::with_capacity(device.capacity.len());
        for i in 0..device.capacity.len() {
            amounts.push((i, sub.consumes(device, i).ok_or(())?));
        }
        let state = &*self.alloc.state;
        if state.share_fits(dra, d, &amounts) && state.counters_fit(dra, d) { Ok(Some(amounts)) } else { Err(()) }
    }

    fn keeps_constraints(&self, c: usize, r: usize, result_name: &str, d: DeviceIdx) -> bool {
        let spec = &self.claims[c].spec.spec;
        let request = &spec.requests[r].name;
        let dra = self.alloc.dra;
        let device = &dra.devices[d as usize];
        for constraint in &spec.constraints {
            if !constraint.applies_to(request, result_name) {
                continue;
            }
            let (name, must_match) = match &constraint.kind {
                ConstraintKind::Match(name) => (name, true),
                ConstraintKind::Distinct(name) => (name, false),
            };
            let Some(value) = device.attribute(name) else { return false };
            for other in &self.chosen[c] {
                let other_request = &spec.requests[other.request];
                let other_result = &other_request.alternatives[other.alternative].result_name;
                if !constraint.applies_to(&other_request.name, other_result) {
                    continue;
                }
                let same = dra.devices[other.device as usize].attribute(name) == Some(value);
                if same != must_match {
                    return false;
                }
            }
        }
        true
    }

    /// Records `d` as chosen; the caller undoes it with `unchoose` and a rollback.
    fn choose(&mut self, c: usize, r: usize, a: usize, d: DeviceIdx, holding: Option<Vec<(usize, Quantity)>>) {
        let admin_access = self.claims[c].spec.spec.requests[r].alternatives[a].admin_access;
        let device = &self.alloc.dra.devices[d as usize];
        let consumed = holding
            .as_ref()
            .map(|amounts| amounts.iter().map(|&(i, q)| (device.capacity[i].0.clone(), q)).collect::<Vec<_>>());
        if !admin_access {
            self.alloc.state.take(self.alloc.dra, d, holding);
        }
        self.chosen[c].push(Chosen { request: r, alternative: a, device: d, admin_access, consumed });
    }

    /// A device may serve one claim once, unless it allows several allocations.
    fn already_in_claim(&self, c: usize, d: DeviceIdx) -> bool {
        !self.alloc.dra.devices[d as usize].allow_multiple_allocations && self.chosen[c].iter().any(|ch| ch.device == d)
    }

    /// ", and 1 more with an untolerated taint" when matching devices were left out for
    /// their taints; empty otherwise.
    fn tainted_note(&self, c: usize, r: usize, a: usize) -> String {
        match self.tainted[c][r][a] {
            0 => String::new(),
            1 => ", and 1 more with an untolerated taint".into(),
            n => format!(", and {n} more with untolerated taints"),
        }
    }

    /// Picks `need` more devices for the item's alternative `a`, from `candidates[start..]`.
    fn pick(&mut self, item: usize, a: usize, candidates: &[DeviceIdx], need: usize, start: usize) -> bool {
        if need == 0 {
            return self.solve(item + 1);
        }
        let (c, r) = self.items[item];
        let claims = self.claims;
        let sub = &claims[c].spec.spec.requests[r].alternatives[a];
        if self.chosen[c].len() + need > MAX_RESULTS {
            let label = self.label(c, r);
            self.ran_short(item, || format!("would need more than {MAX_RESULTS} devices in one claim for {label}"));
            return false;
        }
        for (i, &d) in candidates.iter().enumerate().skip(start) {
            self.steps += 1;
            if self.steps >= self.limit || self.error.is_some() {
                return false;
            }
            let shared = self.alloc.dra.devices[d as usize].allow_multiple_allocations && !sub.distinct;
            if candidates.len() - i < need && !shared {
                break;
            }
            if self.already_in_claim(c, d) || (sub.distinct && self.chosen[c].iter().any(|ch| ch.device == d)) {
                continue;
            }
            let holding = if sub.admin_access { Ok(None) } else { self.holding(d, sub) };
            let Ok(holding) = holding else { continue };
            if !self.keeps_constraints(c, r, &sub.result_name, d) {
                continue;
            }
            let mark = self.alloc.state.mark();
            self.choose(c, r, a, d, holding);
            // A shared device may give this claim another share.
            let next = if shared { i } else { i + 1 };
            if self.pick(item, a, candidates, need - 1, next) {
                return true;
            }
            self.chosen[c].pop();
            self.alloc.state.rollback(mark);
        }
        if start == 0 {
            let label = self.label(c, r);
            let tainted = self.tainted_note(c, r, a);
            let total = candidates.len();
            let available = candidates
                .iter()
                .filter(|&&d| !self.already_in_claim(c, d) && (sub.admin_access || self.holding(d, sub).is_ok()))
                .count();
            self.ran_short(item, || {
                if available < need {
                    format!("had {available} of {total} devices matching {label} free (needs {need}){tainted}")
                } else {
                    format!("had no {need} free devices for {label} that keep the claim's constraints")
                }
            });
        }
        false
    }

    /// `All`: every matching device on the node, none of them taken, at least one.
    fn take_all(&mut self, item: usize, a: usize, candidates: &[DeviceIdx]) -> bool {
        let (c, r) = self.items[item];
        let label = self.label(c, r);
        let dra = self.alloc.dra;
        let node_devices = &dra.node_devices[self.node as usize];
        if let Some(pool) = node_devices.iter().map(|&d| dra.pool_of(d)).find(|pool| !pool.complete) {
            let name = format!("{}/{}", pool.driver, pool.name);
            self.ran_short(item, || {
                format!("had resource pool {name} being updated, and {label} asks for all devices")
            });
            return false;
        }
        if candidates.is_empty() {
            self.ran_short(item, || format!("had no device matching {label}, which asks for all of them"));
            return false;
        }
        if self.chosen[c].len() + candidates.len() > MAX_RESULTS {
            let n = candidates.len();
            self.ran_short(item, || format!("had {n} devices matching {label}, more than {MAX_RESULTS} in one claim"));
            return false;
        }
        let mark = self.alloc.state.mark();
        let before = self.chosen[c].len();
        let claims = self.claims;
        let sub = &claims[c].spec.spec.requests[r].alternatives[a];
        if let Some(&d) = candidates.iter().find(|&&d| !tolerated(&dra.devices[d as usize], sub)) {
            let device = dra.devices[d as usize].id();
            self.ran_short(item, || format!("had device {device} tainted, and {label} asks for all matching devices"));
            return false;
        }
        for &d in candidates {
            let holding = if sub.admin_access { Ok(None) } else { self.holding(d, sub) };
            let ok = !self.already_in_claim(c, d) && self.keeps_constraints(c, r, &sub.result_name, d);
            match holding {
                Ok(holding) if ok => self.choose(c, r, a, d, holding),
                _ => {
                    self.chosen[c].truncate(before);
                    self.alloc.state.rollback(mark);
                    self.ran_short(item, || format!("had devices in use that {label} asks for all of"));
                    return false;
                }
            }
        }
        if self.solve(item + 1) {
            return true;
        }
        self.chosen[c].truncate(before);
        self.alloc.state.rollback(mark);
        false
    }
}
