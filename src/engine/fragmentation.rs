//! GPU fragmentation as the workload sees it. A node's free GPU capacity is *fragmented*
//! for a kind of pod when that kind could not use it: all of it when such a pod cannot fit
//! on the node at all (too little CPU or memory, too few GPUs with room), else the free parts of the
//! GPUs too small for its share. Weighted by how common each kind is, this is the node's
//! expected fragmentation; once the cluster runs GPU fractions, a pod goes where placing it
//! adds the least of it (the measure of fragmentation gradient descent, Weng et al., USENIX
//! ATC '23). The mix of kinds is learned from the pods the engine is asked to place, recent
//! ones counting most, so it follows the cluster's own workload.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;

/// Pods learned after which a kind's weight has halved.
const HALF_LIFE: f64 = 2_000.0;
/// The most common kinds are kept until they cover this share of the weight...
const COVERAGE: f64 = 0.95;
/// ...or this many.
const MAX_KINDS: usize = 64;
/// Distinct kinds remembered at most; the lightest are forgotten beyond it.
const MAX_REMEMBERED: usize = 4_096;

/// One kind of GPU pod: its CPU (millicores), memory (bytes), the GPUs it takes and
/// thousandths of each (1000: whole GPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PodKind {
    pub cpu: i64,
    pub memory: i64,
    pub gpus: u32,
    pub milli: u32,
}

impl PodKind {
    pub fn is_share(&self) -> bool {
        self.gpus > 0 && self.milli < 1000
    }
}

/// The kinds of GPU pods asked for recently, by weight.
#[derive(Clone, Debug, Default)]
pub struct WorkloadMix {
    weights: HashMap<PodKind, f64>,
    /// What one pod adds now: grows by 2^(1/HALF_LIFE) a pod, which is the same as
    /// halving every older weight.
    unit: f64,
    /// The most common kinds with their shares, made when first asked for after a change.
    top: Option<Arc<Kinds>>,
}

/// The most common kinds, with their shares (summing to 1), and whether any is a share of a
/// GPU (only then does fragmentation order nodes).
#[derive(Debug, Default)]
pub struct Kinds {
    pub kinds: Vec<(PodKind, f64)>,
    pub shares: bool,
}

impl WorkloadMix {
    pub fn learn(&mut self, kind: PodKind) {
        if kind.gpus == 0 {
            return;
        }
        self.unit = if self.unit == 0.0 { 1.0 } else { self.unit * 2f64.powf(1.0 / HALF_LIFE) };
        *self.weights.entry(kind).or_default() += self.unit;
        if self.unit > 1e200 {
            let unit = self.unit;
            self.weights.values_mut().for_each(|w| *w /= unit);
            self.unit = 1.0;
        }
        if self.weights.len() > MAX_REMEMBERED {
            let mut sorted: Vec<f64> = self.weights.values().copied().collect();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let floor = sorted[MAX_REMEMBERED / 2];
            self.weights.retain(|_, w| *w > floor);
        }
        self.top = None;
    }

    /// The most common kinds covering most of the weight.
    pub fn top(&mut self) -> Arc<Kinds> {
        if let Some(top) = &self.top {
            return top.clone();
        }
        let mut all: Vec<(PodKind, f64)> = self.weights.iter().map(|(k, w)| (*k, *w)).collect();
        all.sort_by(|a, b| {
            b.1.total_cmp(&a.1).then_with(|| (b.0.gpus, b.0.milli, b.0.cpu).cmp(&(a.0.gpus, a.0.milli, a.0.cpu)))
        });
        let total: f64 = all.iter().map(|(_, w)| w).sum();
        let mut kept = 0.0;
        let mut kinds = Vec::new();
        for (kind, weight) in all {
            if kinds.len() >= MAX_KINDS || (total > 0.0 && kept >= COVERAGE * total) {
                break;
            }
            kept += weight;
            kinds.push((kind, weight));
        }
        kinds.iter_mut().for_each(|(_, w)| *w /= kept.max(f64::MIN_POSITIVE));
        let shares = kinds.iter().any(|(k, _)| k.is_share());
        let top = Arc::new(Kinds { kinds, shares });
        self.top = Some(top.clone());
        top
    }
}

/// A node's GPUs as fragmentation reads them: free thousandths of each, most free first,
/// and its free CPU and memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeGpus {
    pub free: SmallVec<[u32; 8]>,
    pub cpu: i64,
    pub memory: i64,
}

impl NodeGpus {
    pub fn new(mut free: SmallVec<[u32; 8]>, cpu: i64, memory: i64) -> NodeGpus {
        free.sort_unstable_by(|a, b| b.cmp(a));
        NodeGpus { free, cpu, memory }
    }

    /// Whether the node has the CPU and memory for a pod of `kind`.
    fn holds(&self, kind: &PodKind) -> bool {
        self.cpu >= kind.cpu && self.memory >= kind.memory
    }

    pub fn total(&self) -> u32 {
        self.free.iter().sum()
    }

    /// Free GPU capacity `kind` could not use here.
    pub fn fragmented_for(&self, kind: &PodKind) -> u32 {
        let usable = self.free.iter().take_while(|&&f| f >= kind.milli).count();
        if !self.holds(kind) || usable < kind.gpus as usize {
            return self.total();
        }
        self.free[usable..].iter().sum()
    }

    /// The node's expected fragmentation under the mix.
    pub fn fragmentation(&self, kinds: &Kinds) -> f64 {
        if self.free.is_empty() {
            return 0.0;
        }
        kinds.kinds.iter().map(|(kind, share)| share * f64::from(self.fragmented_for(kind))).sum()
    }

    /// The node after a pod of `kind` took its GPUs as the allocator takes them (a share
    /// from the GPU it would leave least of, whole GPUs from those entirely free), or None
    /// when it does not fit.
    pub fn after(&self, kind: &PodKind) -> Option<NodeGpus> {
        if !self.holds(kind) {
            return None;
        }
        let mut free = self.free.clone();
        for _ in 0..kind.gpus {
            // Most free first: the last GPU with room is the tightest fit.
            let i = free.iter().rposition(|&f| f >= kind.milli && (kind.milli < 1000 || f == 1000))?;
            free[i] -= kind.milli.min(free[i]);
            free.sort_unstable_by(|a, b| b.cmp(a));
        }
        Some(NodeGpus { free, cpu: self.cpu - kind.cpu, memory: self.memory - kind.memory })
    }
}

/// How much placing a pod of `kind` on a node adds to its expected fragmentation, in
/// thousandths of a GPU, with the GPU capacity left free after it; None when it does not fit.
pub fn increase(node: &NodeGpus, kind: &PodKind, kinds: &Kinds) -> Option<(f64, u32)> {
    let after = node.after(kind)?;
    Some((after.fragmentation(kinds) - node.fragmentation(kinds), after.total()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(free: &[u32], cpu: i64) -> NodeGpus {
        NodeGpus::new(free.iter().copied().collect(), cpu, 1 << 40)
    }

    fn mix(kinds: &[(PodKind, usize)]) -> Arc<Kinds> {
        let mut mix = WorkloadMix::default();
        for &(kind, times) in kinds {
            (0..times).for_each(|_| mix.learn(kind));
        }
        mix.top()
    }

    const HALF: PodKind = PodKind { cpu: 1000, memory: 1 << 30, gpus: 1, milli: 500 };
    const WHOLE: PodKind = PodKind { cpu: 1000, memory: 1 << 30, gpus: 1, milli: 1000 };

    #[test]
    fn free_capacity_a_kind_cannot_use_is_fragmented_for_it() {
        let n = node(&[1000, 300, 0], 8000);
        assert_eq!(n.fragmented_for(&HALF), 300);
        assert_eq!(n.fragmented_for(&WHOLE), 300);
        // Too little CPU: nothing on the node is usable.
        assert_eq!(node(&[1000, 300], 500).fragmented_for(&HALF), 1300);
        // Two whole GPUs wanted, one free.
        assert_eq!(n.fragmented_for(&PodKind { gpus: 2, ..WHOLE }), 1300);
        // Too little memory: nothing usable either.
        let short = NodeGpus::new([1000, 300].into_iter().collect(), 8000, 1 << 29);
        assert_eq!(short.fragmented_for(&HALF), 1300);
        assert!(short.after(&HALF).is_none());
    }

    #[test]
    fn a_half_goes_where_it_leaves_no_unusable_remainder() {
        let kinds = mix(&[(HALF, 10), (WHOLE, 10)]);
        // Half of a half-used GPU: nothing left over; half of a free GPU: a half left
        // that whole-GPU pods cannot use.
        let (onto_half, _) = increase(&node(&[500, 1000], 8000), &HALF, &kinds).unwrap();
        let (onto_whole, _) = increase(&node(&[1000, 1000], 8000), &HALF, &kinds).unwrap();
        assert!(onto_half < onto_whole, "{onto_half} < {onto_whole}");
        assert!(increase(&node(&[400], 8000), &HALF, &kinds).is_none());
    }

    #[test]
    fn the_mix_forgets_old_kinds_and_stays_bounded() {
        let mut mix = WorkloadMix::default();
        (0..100).for_each(|_| mix.learn(WHOLE));
        (0..20_000).for_each(|_| mix.learn(HALF));
        let top = mix.top();
        assert_eq!(top.kinds[0].0, HALF);
        assert!(top.shares);
        for cpu in 0..10_000 {
            mix.learn(PodKind { cpu, ..HALF });
        }
        assert!(mix.weights.len() <= MAX_REMEMBERED);
        assert!(mix.top().kinds.len() <= MAX_KINDS);
    }
}
