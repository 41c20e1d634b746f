//! The domain search for a gang with a topology constraint.
//!
//! Required level only: the domains of that level that could hold the gang by their free
//! capacity (aggregates, so most domains are rejected without looking at their nodes), best
//! fit first: the domain left with the least free capacity after placing the gang, so that
//! whole domains stay free for the large gangs that need them. Inside the domain, the
//! shapes' bin-packing order keeps what is left on as few nodes as possible.
//!
//! Preferred level: one domain of it if any fits; else the next level out (up to the
//! required one, or the whole cluster), taking the preferred-level domains with the most
//! free capacity first, so that the gang spans as few of them as possible.

use crate::engine::model::Gang;
use crate::engine::place::{GangFit, Key, Scope, Shortfall, Workspace};
use crate::engine::reason::NodeRejections;

use crate::engine::topology::{DomainChoice, DomainIndex, GangTopology};

/// The attempts, in order: a level, and the inner level to span as few domains of as possible.
/// `None` as the level is the whole cluster.
fn attempts(t: GangTopology, configured: usize) -> Vec<(Option<usize>, Option<usize>)> {
    let hierarchical = |l: usize| l < configured;
    match (t.preferred, t.required) {
        (None, None) => vec![(None, None)],
        (None, Some(r)) => vec![(Some(r), None)],
        (Some(p), Some(r)) if p == r => vec![(Some(r), None)],
        // A required level inside the preferred one leaves nothing to prefer.
        (Some(p), Some(r)) if hierarchical(p) && hierarchical(r) && r > p => vec![(Some(r), None)],
        (Some(p), r) => {
            let mut out = vec![(Some(p), None)];
            match r {
                Some(r) if hierarchical(p) && hierarchical(r) => {
                    out.extend((r..p).rev().map(|l| (Some(l), Some(p))));
                }
                Some(r) => out.push((Some(r), Some(p))),
                None => {
                    if hierarchical(p) {
                        out.extend((0..p).rev().map(|l| (Some(l), Some(p))));
                    }
                    out.push((None, Some(p)));
                }
            }
            out
        }
    }
}

/// Whether every node of a domain lies in one domain of the `outer` level.
fn within_one(index: &DomainIndex, level: usize, domain: u32, outer: usize) -> bool {
    let mut nodes = index.levels[level].domains[domain as usize].nodes.iter();
    let Some(&first) = nodes.next() else { return false };
    let Some(want) = index.domain_of(outer, first) else { return false };
    nodes.all(|&n| index.domain_of(outer, n) == Some(want))
}

/// "32 GPUs", "16 devices", "12 cores", "64 example.com/fpga".
fn amount_text(key: Key, amount: i64, workspace: &Workspace<'_>) -> String {
    match key {
        Key::Devices => format!("{amount} devices"),
        Key::Resource(r) if r == crate::engine::resources::ResourceId::CPU => {
            format!("{} cores", amount as f64 / 1000.0)
        }
        Key::Resource(r) => match workspace.snapshot.resources.name(r) {
            "nvidia.com/gpu" | "amd.com/gpu" => format!("{amount} GPUs"),
            name => format!("{amount} {name}"),
        },
    }
}

/// The closest a failed attempt came, for the reason.
struct Closest {
    level: usize,
    domain: u32,
    shortfall: Box<Shortfall>,
}

impl Workspace<'_> {
    /// How many domains of `inner` inside `domain` of `level` the gang would need at least,
    /// taking those with the most free capacity first.
    fn inner_domains_needed(&self, level: usize, domain: u32, inner: usize, key: Key, amount: i64) -> usize {
        let index = &self.snapshot.topology;
        let mut inner_domains: Vec<u32> = index.levels[level].domains[domain as usize]
            .nodes
            .iter()
            .filter_map(|&n| index.domain_of(inner, n))
            .collect();
        inner_domains.sort_unstable();
        inner_domains.dedup();
        let mut free: Vec<i64> = inner_domains.iter().map(|&d| self.domain_key_free(inner, d, key)).collect();
        free.sort_unstable_by(|a, b| b.cmp(a));
        let mut total = 0;
        for (i, f) in free.iter().enumerate() {
            total += f;
            if total >= amount {
                return i + 1;
            }
        }
        usize::MAX
    }

    /// Places a gang with a topology constraint: the first domain, in the search order, that
    /// holds it whole; or nothing, with the reason in the gang's words.
    pub(crate) fn place_in_topology(&mut self, gang: &Gang, t: GangTopology) -> Result<GangFit, Box<Shortfall>> {
        let snapshot = self.snapshot;
        let index = &snapshot.topology;
        let (key, amount) = self.gang_key(gang);
        let mut closest: Option<Closest> = None;
        // The largest free domain of the last level searched, for the reason.
        let mut largest: Option<(usize, u32, i64)> = None;
        let mut largest_ever = 0i64;
        for (level, spread) in attempts(t, index.configured) {
            let Some(level) = level else {
                let scope = spread.map_or(Scope::All, |inner| Scope::Spread { inner, key });
                return self.place_in(gang, scope);
            };
            let mut candidates: Vec<(u32, i64, usize)> = Vec::new();
            largest = None;
            for domain in 0..index.levels[level].domains.len() as u32 {
                if let Some(required) = t.required
                    && required != level
                    && !within_one(index, level, domain, required)
                {
                    continue;
                }
                let free = self.domain_key_free(level, domain, key);
                if largest.is_none_or(|(_, _, f)| free > f) {
                    largest = Some((level, domain, free));
                }
                let allocatable = match key {
                    Key::Resource(r) => self.domain_allocatable[level][domain as usize].get(r),
                    Key::Devices => index.levels[level].domains[domain as usize]
                        .nodes
                        .iter()
                        .map(|&n| snapshot.dra.node_devices.get(n as usize).map_or(0, Vec::len) as i64)
                        .sum(),
                };
                largest_ever = largest_ever.max(allocatable);
                if free < amount {
                    continue;
                }
                let inner = spread.map_or(1, |s| self.inner_domains_needed(level, domain, s, key, amount));
                candidates.push((domain, free, inner));
            }
            match self.domain_choice {
                DomainChoice::BestFit => candidates.sort_by_key(|&(d, free, inner)| (inner, free, d)),
                DomainChoice::FirstFit => candidates.sort_by_key(|&(d, _, _)| d),
            }
            for (domain, _, _) in candidates {
                let scope = Scope::Domain { level, domain, spread: spread.map(|s| (s, key)) };
                match self.place_in(gang, scope) {
                    Ok(fit) => return Ok(fit),
                    Err(shortfall) if shortfall.error.is_some() => return Err(shortfall),
                    Err(shortfall) => {
                        if closest.as_ref().is_none_or(|c| shortfall.fit > c.shortfall.fit) {
                            closest = Some(Closest { level, domain, shortfall });
                        }
                    }
                }
            }
        }
        // Nothing held it: say why, at the level that bounds the search.
        let bound = t.required.or(t.preferred).expect("a topology constraint names a level");
        let level_name = &index.levels[bound].name;
        let needs = amount_text(key, amount, self);
        let never_fits = largest_ever < amount;
        let message = match (closest, largest) {
            (Some(c), _) => {
                let name = &index.levels[c.level].domains[c.domain as usize].value;
                format!(
                    "{} needs {} pods at once in one {}; the closest, {} {name}, holds {}: {}",
                    gang.key,
                    c.shortfall.needed,
                    index.levels[c.level].name,
                    index.levels[c.level].name,
                    c.shortfall.fit,
                    c.shortfall.nodes
                )
            }
            (None, Some((l, d, free))) => {
                let name = &index.levels[l].domains[d as usize].value;
                let has = amount_text(key, free, self);
                let has = has.split_once(' ').map_or(has.as_str(), |(n, _)| n).to_string();
                format!(
                    "{} needs {needs} in one {level_name}; the largest free {level_name}, {name}, has {has}",
                    gang.key
                )
            }
            (None, None) => format!(
                "{} needs one {level_name} (node label {}), and no node has that label",
                gang.key, index.levels[bound].label
            ),
        };
        Err(Box::new(Shortfall {
            fit: 0,
            needed: gang.still_needed(),
            never_fits,
            nodes: NodeRejections::default(),
            error: None,
            topology: Some(message),
        }))
    }

    /// The domain a blocked gang's reservation is kept in: of its required level, the one
    /// with the most free capacity among those large enough for it.
    pub(crate) fn reservation_domain(&mut self, gang: &Gang) -> Option<(usize, u32)> {
        let level = gang.topology?.required?;
        let (key, amount) = self.gang_key(gang);
        let index = &self.snapshot.topology;
        (0..index.levels[level].domains.len() as u32)
            .filter(|&d| match key {
                Key::Resource(r) => self.domain_allocatable[level][d as usize].get(r) >= amount,
                Key::Devices => true,
            })
            .max_by_key(|&d| (self.domain_key_free(level, d, key), std::cmp::Reverse(d)))
            .map(|d| (level, d))
    }
}
