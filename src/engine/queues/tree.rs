//! The queue tree, validated: parents resolved, cycles and bad amounts found, each problem
//! kept on the queue it belongs to so that only that queue's gangs wait for it.

use std::collections::HashMap;
use std::fmt;

use super::refusal::Refusal;
use super::{DEFAULT_QUEUE, GPU_MILLI, GPU_RESOURCE, QueueSpec, ResourceRule};
use crate::engine::resources::{Demand, ResourceId, ResourceNames};

/// Why a queue takes no gangs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeProblem {
    /// What the shell found wrong with the object.
    Object(String),
    MissingParent(String),
    /// The queues of the cycle, in parent order, starting and ending at this one.
    Cycle(Vec<String>),
    /// A negative amount: the resource, its name (once [`QueueTree::name_keys`] has run;
    /// until then its number) and the field.
    Negative {
        id: ResourceId,
        key: String,
        field: &'static str,
    },
    /// An ancestor has a problem of its own.
    InvalidAncestor(String),
}

impl fmt::Display for TreeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeProblem::Object(why) => write!(f, "{why}"),
            TreeProblem::MissingParent(parent) => write!(f, "its parent queue {parent} does not exist"),
            TreeProblem::Cycle(path) => write!(f, "its parents form a cycle: {}", path.join(" -> ")),
            TreeProblem::Negative { key, field, .. } => write!(f, "{key}: {field} is negative"),
            TreeProblem::InvalidAncestor(name) => write!(f, "its ancestor queue {name} is invalid"),
        }
    }
}

/// One queue in the tree.
#[derive(Clone, Debug, PartialEq)]
pub struct Queue {
    pub spec: QueueSpec,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// Its rule for each of the tree's keys (an ungoverned key: no quota, weight 1, no
    /// limit).
    pub rules: Vec<ResourceRule>,
    /// Per key: whether it sets a rule of its own for it.
    pub governed: Vec<bool>,
    pub problem: Option<TreeProblem>,
    /// The `default` queue Muster adds when no object defines it.
    pub implicit: bool,
}

impl Queue {
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }
}

/// Every queue, valid or not, with the keys any of them governs.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueTree {
    pub queues: Vec<Queue>,
    /// Valid top-level queues, in name order.
    pub roots: Vec<usize>,
    /// The resource keys some queue governs, in id order; amounts elsewhere are indexed
    /// like this.
    pub keys: Vec<ResourceId>,
    /// The index of [`GPU_RESOURCE`] among `keys`, whose amounts are in thousandths of a
    /// GPU so that fractions count fractionally (set by [`QueueTree::name_keys`]).
    pub gpu_key: Option<usize>,
    by_name: HashMap<String, usize>,
}

impl Default for QueueTree {
    /// The implicit default queue alone.
    fn default() -> Self {
        QueueTree::build(&[])
    }
}

impl QueueTree {
    /// Validates `specs` into a tree. A queue named `default` is added (top level, no
    /// quota, unlimited) when none is given; with no specs at all it is the only queue and
    /// governs nothing, so that queues change nothing until the first one is created.
    pub fn build(specs: &[QueueSpec]) -> QueueTree {
        let mut tree = QueueTree {
            queues: Vec::new(),
            roots: Vec::new(),
            keys: Vec::new(),
            gpu_key: None,
            by_name: HashMap::new(),
        };
        let mut sorted: Vec<&QueueSpec> = specs.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        for spec in sorted {
            if tree.by_name.contains_key(&spec.name) {
                continue;
            }
            tree.push(spec.clone(), false);
        }
        if !tree.by_name.contains_key(DEFAULT_QUEUE) {
            // Gangs nobody queued keep first come, first served among themselves: no
            // priority preemption until a `default` Queue object asks for it.
            let mut implicit = QueueSpec::new(DEFAULT_QUEUE);
            implicit.preemption.within = super::WithinQueue::Never;
            tree.push(implicit, true);
        }
        let mut keys: Vec<ResourceId> =
            tree.queues.iter().flat_map(|q| q.spec.resources.iter().map(|&(id, _)| id)).collect();
        keys.sort();
        keys.dedup();
        tree.keys = keys;
        for queue in &mut tree.queues {
            queue.rules = tree
                .keys
                .iter()
                .map(|id| queue.spec.resources.iter().find(|(k, _)| k == id).map(|&(_, r)| r).unwrap_or_default())
                .collect();
            queue.governed = tree.keys.iter().map(|id| queue.spec.resources.iter().any(|(k, _)| k == id)).collect();
        }
        tree.link();
        tree
    }

    fn push(&mut self, spec: QueueSpec, implicit: bool) {
        self.by_name.insert(spec.name.clone(), self.queues.len());
        let problem = spec.problem.clone().map(TreeProblem::Object);
        let queue = Queue {
            spec,
            parent: None,
            children: Vec::new(),
            rules: Vec::new(),
            governed: Vec::new(),
            problem,
            implicit,
        };
        self.queues.push(queue);
    }

    /// Resolves parents, finds cycles and negative amounts, marks the descendants of an
    /// invalid queue, and links the valid ones.
    fn link(&mut self) {
        let n = self.queues.len();
        for i in 0..n {
            let parent = self.queues[i].spec.parent.clone().filter(|p| !p.is_empty());
            if let Some(parent) = parent {
                match self.by_name.get(&parent) {
                    Some(&p) => self.queues[i].parent = Some(p),
                    None => {
                        self.queues[i].problem.get_or_insert(TreeProblem::MissingParent(parent));
                    }
                }
            }
            if self.queues[i].problem.is_none() {
                let negative = self.queues[i].spec.resources.iter().find_map(|&(_, r)| {
                    let fields = [("quota", r.quota), ("limit", r.limit), ("lendingLimit", r.lending_limit)];
                    fields.into_iter().find(|(_, v)| v.is_some_and(|v| v < 0)).map(|(field, _)| field)
                });
                if let Some(field) = negative {
                    let &(id, _) = self.queues[i]
                        .spec
                        .resources
                        .iter()
                        .find(|(_, r)| [r.quota, r.limit, r.lending_limit].iter().any(|v| v.is_some_and(|v| v < 0)))
                        .expect("found above");
                    self.queues[i].problem =
                        Some(TreeProblem::Negative { id, key: format!("resource {}", id.0), field });
                }
            }
        }
        // Cycles: follow parents; a walk longer than the tree is in one.
        for i in 0..n {
            let mut path = vec![i];
            let mut at = i;
            while let Some(p) = self.queues[at].parent {
                if p == i {
                    path.push(i);
                    let names = path.iter().map(|&q| self.queues[q].spec.name.clone()).collect();
                    self.queues[i].problem = Some(TreeProblem::Cycle(names));
                    break;
                }
                if path.len() > n {
                    break;
                }
                path.push(p);
                at = p;
            }
        }
        // Descendants of an invalid queue are invalid too (in parent order, any depth).
        loop {
            let mut changed = false;
            for i in 0..n {
                if self.queues[i].problem.is_some() {
                    continue;
                }
                if let Some(p) = self.queues[i].parent
                    && self.queues[p].problem.is_some()
                {
                    let name = self.queues[p].spec.name.clone();
                    self.queues[i].problem = Some(TreeProblem::InvalidAncestor(name));
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for i in 0..n {
            if self.queues[i].problem.is_some() {
                continue;
            }
            match self.queues[i].parent {
                Some(p) => self.queues[p].children.push(i),
                None => self.roots.push(i),
            }
        }
        let queues = &self.queues;
        self.roots.sort_by(|&a, &b| queues[a].spec.name.cmp(&queues[b].spec.name));
    }

    /// Names negative-amount problems by resource name rather than id.
    pub fn name_keys(&mut self, names: &ResourceNames) {
        self.gpu_key = self.keys.iter().position(|&id| names.name(id) == GPU_RESOURCE);
        for queue in &mut self.queues {
            if let Some(TreeProblem::Negative { id, key, .. }) = &mut queue.problem {
                *key = names.name(*id).to_string();
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Whether any queue object exists (beyond the implicit default).
    pub fn is_configured(&self) -> bool {
        self.queues.iter().any(|q| !q.implicit)
    }

    /// The queue and its ancestors, leaf first.
    pub fn path(&self, queue: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(queue), |&q| self.queues[q].parent)
    }

    /// Whether gangs of `leaf` may run opportunistically in held capacity: the first
    /// queue on its path that says, else `default` (the configuration's).
    pub fn opportunistic_backfill(&self, leaf: usize, default: bool) -> bool {
        self.path(leaf).find_map(|q| self.queues[q].spec.opportunistic_backfill).unwrap_or(default)
    }

    /// The position of `id` among the tree's keys.
    pub fn key_index(&self, id: ResourceId) -> Option<usize> {
        self.keys.binary_search(&id).ok()
    }

    /// How many of key `k`'s amounts make one unit of its resource: 1000 for GPUs
    /// (thousandths), 1 for the rest (CPU is in millicores everywhere already).
    pub fn scale(&self, k: usize) -> i64 {
        if self.gpu_key == Some(k) { GPU_MILLI } else { 1 }
    }

    /// Adds `demand`, `times` over, to `need` (per key of the tree), in the tree's units.
    pub fn add_demand(&self, need: &mut [i64], demand: &Demand, times: i64) {
        for &(id, amount) in demand.entries() {
            if let Some(k) = self.key_index(id) {
                need[k] += amount * times * self.scale(k);
            }
        }
    }
}

/// The leaf queue a gang is admitted through, or why it has none.
pub fn resolve(tree: &QueueTree, name: &str, namespace: &str) -> Result<usize, Refusal> {
    // Without Queue objects every gang is in the implicit default, whatever it names
    // (a KAI or Kueue queue label, say): queues change nothing until the first exists.
    if !tree.is_configured() {
        return Ok(tree.roots[0]);
    }
    let Some(q) = tree.get(name) else {
        return Err(Refusal::QueueDoesNotExist(name.to_string()));
    };
    let queue = &tree.queues[q];
    if let Some(problem) = &queue.problem {
        return Err(Refusal::QueueInvalid { queue: name.to_string(), problem: problem.to_string() });
    }
    if !queue.is_leaf() {
        return Err(Refusal::QueueNotLeaf(name.to_string()));
    }
    if queue.spec.stopped {
        return Err(Refusal::QueueStopped(name.to_string()));
    }
    if let Some(allowed) = &queue.spec.namespaces
        && !allowed.iter().any(|n| n == namespace)
    {
        return Err(Refusal::NamespaceNotAllowed { queue: name.to_string(), namespace: namespace.to_string() });
    }
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, parent: Option<&str>) -> QueueSpec {
        QueueSpec { parent: parent.map(str::to_string), ..QueueSpec::new(name) }
    }

    #[test]
    fn no_queues_means_one_implicit_default_that_governs_nothing() {
        let tree = QueueTree::build(&[]);
        assert_eq!(tree.queues.len(), 1);
        assert!(tree.queues[0].implicit && tree.keys.is_empty() && !tree.is_configured());
        assert_eq!(tree.roots, vec![0]);
    }

    #[test]
    fn parents_are_linked_and_only_leaves_have_no_children() {
        let tree = QueueTree::build(&[spec("org", None), spec("a", Some("org")), spec("b", Some("org"))]);
        let org = tree.get("org").unwrap();
        assert_eq!(tree.queues[org].children.len(), 2);
        assert!(!tree.queues[org].is_leaf() && tree.queues[tree.get("a").unwrap()].is_leaf());
        let roots: Vec<&str> = tree.roots.iter().map(|&r| tree.queues[r].spec.name.as_str()).collect();
        assert_eq!(roots, vec!["default", "org"]);
        let path: Vec<usize> = tree.path(tree.get("a").unwrap()).collect();
        assert_eq!(path, vec![tree.get("a").unwrap(), org]);
    }

    #[test]
    fn a_missing_parent_a_cycle_and_a_negative_quota_spoil_only_their_own_subtrees() {
        let mut negative = spec("neg", None);
        negative.resources = vec![(ResourceId(4), ResourceRule { quota: Some(-1), ..Default::default() })];
        let tree = QueueTree::build(&[
            spec("orphan", Some("nowhere")),
            spec("x", Some("y")),
            spec("y", Some("x")),
            spec("below-x", Some("x")),
            negative,
            spec("fine", None),
        ]);
        let problem = |name: &str| tree.queues[tree.get(name).unwrap()].problem.clone();
        assert_eq!(problem("orphan"), Some(TreeProblem::MissingParent("nowhere".into())));
        assert_eq!(problem("x").unwrap().to_string(), "its parents form a cycle: x -> y -> x");
        assert_eq!(problem("below-x"), Some(TreeProblem::InvalidAncestor("x".into())));
        assert_eq!(
            problem("neg"),
            Some(TreeProblem::Negative { id: ResourceId(4), key: "resource 4".into(), field: "quota" })
        );
        assert_eq!(problem("fine"), None);
        assert!(tree.roots.iter().all(|&r| tree.queues[r].problem.is_none()));
    }
}
