//! Why a queue does not admit a gang, in words a person can act on, with amounts as
//! Kubernetes quantities.

use std::fmt;

use crate::engine::resources::{ResourceId, ResourceNames};

/// Why a gang's queue does not admit it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    QueueDoesNotExist(String),
    QueueInvalid {
        queue: String,
        problem: String,
    },
    QueueNotLeaf(String),
    QueueStopped(String),
    NamespaceNotAllowed {
        queue: String,
        namespace: String,
    },
    OverLimit {
        queue: String,
        resource: String,
        limit: String,
        allocated: String,
        needs: String,
    },
    NonPreemptibleOverQuota {
        queue: String,
        resource: String,
        quota: String,
        allocated: String,
        needs: String,
    },
    /// Idle quota that these queues do not lend would be used.
    LendingLimit {
        resource: String,
        kept: Vec<(String, String)>,
    },
    /// Evicted not long ago: until `until` it takes only what its queue is owed.
    RecentlyEvicted {
        queue: String,
        until: i64,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::QueueDoesNotExist(q) => write!(f, "queue {q} does not exist"),
            Refusal::QueueInvalid { queue, problem } => write!(f, "queue {queue} is invalid: {problem}"),
            Refusal::QueueNotLeaf(q) => write!(f, "queue {q} has child queues; only leaf queues take gangs"),
            Refusal::QueueStopped(q) => write!(f, "queue {q} is stopped (stopPolicy); it admits no new gang"),
            Refusal::NamespaceNotAllowed { queue, namespace } => {
                write!(f, "queue {queue} does not admit namespace {namespace} (namespaceSelector)")
            }
            Refusal::OverLimit { queue, resource, limit, allocated, needs } => write!(
                f,
                "queue {queue} would exceed its limit of {limit} {resource} ({allocated} allocated, the gang needs {needs})"
            ),
            Refusal::NonPreemptibleOverQuota { queue, resource, quota, allocated, needs } => write!(
                f,
                "a non-preemptible gang runs only within quota: queue {queue} has {quota} {resource}, \
                 {allocated} held by non-preemptible gangs, the gang needs {needs}"
            ),
            Refusal::LendingLimit { resource, kept } => {
                let kept: Vec<String> = kept.iter().map(|(q, a)| format!("{q} keeps {a} {resource}")).collect();
                write!(f, "the free {resource} is quota its owners do not lend ({})", kept.join(", "))
            }
            Refusal::RecentlyEvicted { queue, until } => write!(
                f,
                "it was evicted recently: until {} it takes only what queue {queue} is owed (its fair share), \
                 not borrowed capacity it would be evicted from again",
                crate::engine::clock::at(*until)
            ),
        }
    }
}

/// An amount kept in thousandths (`scale` 1000, as GPUs in queues) in whole units: `2`,
/// `0.5`, `1.25`; any other scale as it is.
pub fn in_units(amount: i64, scale: i64) -> String {
    if scale != 1000 {
        return amount.to_string();
    }
    let (whole, part) = (amount / scale, (amount % scale).abs());
    if part == 0 {
        return whole.to_string();
    }
    let sign = if amount < 0 && whole == 0 { "-" } else { "" };
    let decimals = format!("{part:03}");
    format!("{sign}{whole}.{}", decimals.trim_end_matches('0'))
}

/// An amount in the engine's units as a Kubernetes quantity.
pub fn quantity(names: &ResourceNames, id: ResourceId, amount: i64) -> String {
    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;
    let name = names.name(id);
    let bytes = matches!(name, "memory" | "ephemeral-storage") || name.starts_with("memory.deviceclass/");
    match name {
        "cpu" if amount % 1000 == 0 => (amount / 1000).to_string(),
        "cpu" => format!("{amount}m"),
        super::GPU_RESOURCE => in_units(amount, super::GPU_MILLI),
        _ if bytes && amount != 0 && amount % GI == 0 => format!("{}Gi", amount / GI),
        _ if bytes && amount != 0 && amount % MI == 0 => format!("{}Mi", amount / MI),
        _ => amount.to_string(),
    }
}
