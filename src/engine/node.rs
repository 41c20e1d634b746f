//! A node as the engine sees it, and the taints, tolerations and label requirements that
//! decide which pods (and which devices) it takes.
//!
//! It sits below the cluster model and the DRA model, which both read nodes, so that the
//! DRA model need not import the cluster model.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::resources::{Capacity, ResourceId, ResourceNames};

/// Index of a node in [`Snapshot::nodes`](crate::engine::model::Snapshot::nodes).
pub type NodeIdx = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty with `Exists`: tolerates every taint.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// None: every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        self.key == taint.key
            && match self.operator {
                TolerationOperator::Exists => true,
                TolerationOperator::Equal => self.value == taint.value,
            }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One requirement of a node selector term, on node labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

impl LabelRequirement {
    /// Whether `node` meets the requirement: on its labels, or on its name for the field
    /// `metadata.name` (a node selector's `matchFields`).
    pub fn matches_node(&self, node: &Node) -> bool {
        if self.key == "metadata.name" {
            return self.matches_value(Some(&node.name));
        }
        self.matches(&node.labels)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(&self.key))
    }

    fn matches_value(&self, value: Option<&String>) -> bool {
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt { v > bound } else { v < bound }
            }
        }
    }
}

/// A node as the engine sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    /// Shared: a snapshot's nodes are copied from the conversions kept between cycles, and
    /// labels and taints are most of a node.
    pub labels: Arc<BTreeMap<String, String>>,
    pub taints: Arc<Vec<Taint>>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    pub allocatable: Capacity,
    /// What the pods bound here request, whichever scheduler placed them.
    pub requested: Capacity,
}

impl Node {
    pub fn free(&self, names: &ResourceNames) -> Capacity {
        let mut free = Capacity::default();
        for i in 0..names.len() {
            let id = ResourceId(i as u16);
            free.set(id, self.allocatable.get(id) - self.requested.get(id));
        }
        free
    }
}
