//! Writes that are not part of a gang's transaction: pod conditions, events, PodGroup
//! status, evictions and claim releases, sent in the background so that no slow or silent
//! API server holds up a scheduling cycle.
//!
//! The queue is keyed by object: the newest wanted state per key wins, and a state equal to
//! the one last written is not written again. A few workers drain it, one write per key at
//! a time, each under the request deadline, and only while this replica leads; losing the
//! lead drops what is queued. The writes themselves are a [`Sink`], so tests use a fake one.
//!
//! Statuses and events only inform: while bindings are in flight ([`Writer::binding`]) they
//! wait, up to a few seconds, and then go one at a time, so a burst of bindings has the API
//! server first. At most a few thousand events wait; past that the oldest are dropped.
//!
//! An eviction that fails is not left to the next cycle: it is queued again after a doubling
//! delay, and after the configured number of refusals the writer hands the sink a delete of
//! the pod instead (see [`super::refusals`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use tokio::sync::Notify;

use super::refusals::{RefusalPolicy, Refused, deleted_note};
use crate::api::pod_group::PodGroupStatus;
use crate::api::queue::QueueStatus;
use crate::convert::status::Unplaced;
use crate::k8s::client::request::RequestError;
use crate::k8s::write::claims::Release;
use crate::metrics::Metrics;
use queue::Queue;

mod queue;

/// The API's limit on an event's note, in bytes.
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// A pod by name and, where known, the UID it had when the write was decided.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl PodRef {
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }
}

/// One wanted state.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// `PodScheduled=False` with reason Unschedulable (or Unsupported: a constraint Muster
    /// does not honour yet), and a FailedScheduling event.
    Unschedulable { pod: PodRef, message: String, unplaced: Unplaced },
    /// An event about a pod: `Scheduled`, or why it was evicted.
    PodEvent { pod: PodRef, warning: bool, reason: String, note: String, action: String },
    /// A Muster PodGroup's whole status.
    MusterGroup { namespace: String, name: String, status: PodGroupStatus },
    /// A Kubernetes PodGroup's conditions, with `PodGroupInitiallyScheduled` added.
    KubernetesGroup { namespace: String, name: String, conditions: Vec<Condition> },
    /// An eviction through the Eviction API, only of the pod with this UID, decided for the
    /// gang named.
    Evict { pod: PodRef, gang: String },
    /// A delete of the pod with this UID, made by the writer in place of an eviction refused
    /// too often, with an event whose note says why.
    DeletePod { pod: PodRef, note: String },
    /// Reservations to drop from a claim whose pods are gone.
    ReleaseClaim(Release),
    /// A Muster Queue's whole status.
    Queue { name: String, status: QueueStatus },
}

/// What a write is about: a newer write with the same key replaces a queued one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WriteKey {
    PodCondition(PodRef),
    /// An event by its pod, reason and note: the same event is sent once, different ones
    /// each.
    PodEvent(PodRef, String, String),
    MusterGroup(String, String),
    KubernetesGroup(String, String),
    Evict(PodRef),
    Claim(String, String),
    Queue(String),
}

impl Write {
    pub fn key(&self) -> WriteKey {
        match self {
            Write::Unschedulable { pod, .. } => WriteKey::PodCondition(pod.clone()),
            Write::PodEvent { pod, reason, note, .. } => WriteKey::PodEvent(pod.clone(), reason.clone(), note.clone()),
            Write::MusterGroup { namespace, name, .. } => WriteKey::MusterGroup(namespace.clone(), name.clone()),
            Write::KubernetesGroup { namespace, name, .. } => {
                WriteKey::KubernetesGroup(namespace.clone(), name.clone())
            }
            Write::Evict { pod, .. } | Write::DeletePod { pod, .. } => WriteKey::Evict(pod.clone()),
            Write::ReleaseClaim(release) => {
                WriteKey::Claim(release.claim.namespace.clone(), release.claim.name.clone())
            }
            Write::Queue { name, .. } => WriteKey::Queue(name.clone()),
        }
    }

    /// Whether the same write may be wanted again while its object lasts, so that what was
    /// written is remembered and not written twice: every state, and every event but
    /// `Scheduled` (a failure, or an eviction's note, is told each time it is decided). A
    /// pod is bound once, so its `Scheduled` event is not remembered: 20,000 bindings leave
    /// no 20,000 notes behind.
    pub fn repeats(&self) -> bool {
        !matches!(self, Write::PodEvent { warning: false, reason, .. } if reason == "Scheduled")
    }

    /// The metric label of this kind of write.
    pub fn kind(&self) -> &'static str {
        match self {
            Write::Unschedulable { .. } => "pod_condition",
            Write::PodEvent { .. } => "event",
            Write::MusterGroup { .. } | Write::KubernetesGroup { .. } => "podgroup_status",
            Write::Evict { .. } => "eviction",
            Write::DeletePod { .. } => "pod_delete",
            Write::ReleaseClaim(_) => "claim_release",
            Write::Queue { .. } => "queue_status",
        }
    }

    /// The pod the write is about, if any.
    pub fn pod(&self) -> Option<&PodRef> {
        match self {
            Write::Unschedulable { pod, .. }
            | Write::PodEvent { pod, .. }
            | Write::Evict { pod, .. }
            | Write::DeletePod { pod, .. } => Some(pod),
            _ => None,
        }
    }
}

/// Cuts `note` to the API's limit on a character boundary, marking the cut.
pub fn truncate_note(note: &str) -> String {
    if note.len() <= EVENT_NOTE_LIMIT {
        return note.to_string();
    }
    let mut end = EVENT_NOTE_LIMIT - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

/// A binding in flight, from [`Writer::binding`]; when the last ends, held statuses and
/// events go.
pub struct BindingInFlight(Writer);

impl Drop for BindingInFlight {
    fn drop(&mut self) {
        let mut queue = self.0.queue();
        queue.bindings -= 1;
        let idle = queue.bindings == 0 && queue.holds();
        drop(queue);
        if idle {
            self.0.shared.ready.notify_waiters();
            self.0.shared.ready.notify_one();
        }
    }
}

/// Where writes go: the API server, or a test's record.
pub trait Sink: Send + Sync + 'static {
    /// Performs one write; the writer has already applied the deadline.
    fn write<'a>(&'a self, write: &'a Write) -> BoxFuture<'a, Result<(), RequestError>>;
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Notify,
    sink: Arc<dyn Sink>,
    deadline: std::time::Duration,
    leading: AtomicBool,
    metrics: Arc<Metrics>,
    refusals: RefusalPolicy,
    /// Checked before every write: nothing is sent that could end after another replica
    /// may lead.
    fence: Option<Arc<super::fence::Fence>>,
}

/// The writer's handle: cheap to clone; workers run from [`Writer::work`].
#[derive(Clone)]
pub struct Writer {
    shared: Arc<Shared>,
}

impl Writer {
    /// A writer that does not lead yet: it takes writes only after `set_leading(true)`.
    pub fn new(sink: Arc<dyn Sink>, deadline: std::time::Duration, metrics: Arc<Metrics>) -> Writer {
        Writer {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Notify::new(),
                sink,
                deadline,
                leading: AtomicBool::new(false),
                metrics,
                refusals: RefusalPolicy::default(),
                fence: None,
            }),
        }
    }

    /// The same writer with `policy` for refused evictions (set before it is shared).
    pub fn with_refusals(mut self, policy: RefusalPolicy) -> Writer {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.refusals = policy;
        }
        self
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The same writer behind `fence` (set before it is shared).
    pub fn with_fence(mut self, fence: Arc<super::fence::Fence>) -> Writer {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.fence = Some(fence);
        }
        self
    }

    /// Writes go out only while this is true; turning it false drops what is queued.
    pub fn set_leading(&self, leading: bool) {
        self.shared.leading.store(leading, Ordering::SeqCst);
        if !leading {
            let mut queue = self.queue();
            queue.pending.clear();
            queue.order.clear();
            queue.statuses.clear();
            queue.events.clear();
            queue.refused.clear();
            // The next leader's writes are compared with the cluster afresh.
            queue.written.clear();
            self.shared.metrics.write_queue_depth.set(0);
        }
    }

    /// Queues a wanted state: it replaces a queued one with the same key, and is dropped
    /// when it equals what was last written for that key, or when this replica does not lead.
    pub fn submit(&self, write: Write) {
        if !self.shared.leading.load(Ordering::SeqCst) {
            return;
        }
        let key = write.key();
        let mut queue = self.queue();
        if queue.written.get(&key) == Some(&write) && !queue.busy.contains(&key) {
            // What is queued for the key is older than what is wanted now: drop it.
            queue.pending.remove(&key);
            self.shared.metrics.write_queue_depth.set(queue.pending.len() as i64);
            return;
        }
        let kind = write.kind();
        if queue.pending.insert(key.clone(), write).is_none() {
            let dropped = queue.push(key);
            if dropped > 0 {
                self.shared.metrics.writes.with_label_values(&[kind, "dropped"]).inc_by(dropped as u64);
            }
        }
        self.shared.metrics.write_queue_depth.set(queue.pending.len() as i64);
        drop(queue);
        self.shared.ready.notify_one();
    }

    /// Forgets what was written for keys that `keep` rejects (objects that are gone).
    pub fn retain(&self, keep: impl Fn(&WriteKey) -> bool) {
        let mut queue = self.queue();
        queue.written.retain(|key, _| keep(key));
        queue.refused.retain(|key, _| keep(key));
    }

    /// When the next refused eviction may be tried again, or the oldest status or event
    /// held for bindings may go, if one waits.
    /// Only times still to come: a write already due but not taken waits on another in
    /// flight (the same key, or the one status or event a burst lets through), whose end
    /// wakes a worker; a time already past would wake the workers at once, again and again.
    fn next_retry(&self) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        let queue = self.queue();
        let refused =
            queue.refused.iter().filter(|(key, _)| queue.pending.contains_key(*key)).map(|(_, r)| r.not_before);
        refused.chain(queue.held_until()).filter(|at| *at > now).min()
    }

    /// Marks a binding in flight until the guard is dropped: statuses and events wait
    /// meanwhile, up to `HOLD`, so that a burst of bindings has the API server first.
    pub fn binding(&self) -> BindingInFlight {
        self.queue().bindings += 1;
        BindingInFlight(self.clone())
    }

    /// Writes queued and not yet taken by a worker.
    pub fn depth(&self) -> usize {
        self.queue().pending.len()
    }

    /// The next key a worker may take: queued, not being written by another worker, and not
    /// a refused eviction still waiting out its delay. Every key in `pending` has an entry in
    /// `order`; entries whose state was dropped meanwhile are skipped. Returns the wanted
    /// state and what to send for it: a delete in place of an eviction refused too often.
    fn take(&self) -> Option<(WriteKey, Write, Write)> {
        if !self.shared.leading.load(Ordering::SeqCst) {
            return None;
        }
        let now = tokio::time::Instant::now();
        let mut queue = self.queue();
        loop {
            let key = queue.next_key(now)?;
            if let Some(write) = queue.pending.remove(&key) {
                queue.claim(&key);
                self.shared.metrics.write_queue_depth.set(queue.pending.len() as i64);
                let send = match (&write, queue.refused.get(&key)) {
                    (Write::Evict { pod, gang }, Some(r)) if r.delete_next(&self.shared.refusals) => {
                        Write::DeletePod { pod: pod.clone(), note: deleted_note(gang, r) }
                    }
                    _ => write.clone(),
                };
                return Some((key, write, send));
            }
        }
    }

    fn done(&self, key: WriteKey, write: Write, error: Option<String>) {
        let mut queue = self.queue();
        queue.release(&key);
        match error {
            None => {
                queue.refused.remove(&key);
                if write.repeats() {
                    queue.written.insert(key, write);
                }
            }
            // A refused eviction waits and goes again by itself, unless a newer state for
            // its pod is queued meanwhile (which then waits the same delay).
            Some(error) if matches!(write, Write::Evict { .. }) => {
                let refused =
                    Refused::after(queue.refused.get(&key), error, &self.shared.refusals, tokio::time::Instant::now());
                queue.refused.insert(key.clone(), refused);
                if !queue.pending.contains_key(&key) {
                    queue.pending.insert(key.clone(), write);
                    queue.push(key);
                }
                self.shared.metrics.write_queue_depth.set(queue.pending.len() as i64);
            }
            Some(_) => {}
        }
        drop(queue);
        self.shared.ready.notify_one();
    }

    /// Writes one queued state, if any; false when there was none to take.
    pub async fn write_one(&self) -> bool {
        let Some((key, wanted, write)) = self.take() else { return false };
        let kind = write.kind();
        if self.shared.fence.as_ref().is_some_and(|f| !f.allows()) {
            // Not sent, and not counted as refused: this replica may not lead any more.
            self.shared.metrics.writes.with_label_values(&[kind, "fenced"]).inc();
            self.queue().release(&key);
            return true;
        }
        let result = match tokio::time::timeout(self.shared.deadline, self.shared.sink.write(&write)).await {
            Ok(result) => result,
            Err(_) => Err(RequestError::TimedOut(self.shared.deadline)),
        };
        let label = match &result {
            Ok(()) => "written",
            Err(e) if e.is_timeout() => "timed_out",
            Err(_) => "failed",
        };
        self.shared.metrics.writes.with_label_values(&[kind, label]).inc();
        if let Err(e) = &result {
            if matches!(wanted, Write::Evict { .. }) {
                self.shared.metrics.eviction_refusals.inc();
                tracing::warn!(object = ?key, error = %e, "eviction refused; tried again after a delay");
            } else {
                tracing::warn!(kind, object = ?key, error = %e, "write failed; it is decided again next cycle");
            }
        } else if matches!(write, Write::DeletePod { .. }) {
            self.shared.metrics.evictions_forced.inc();
        }
        self.done(key, wanted, result.err().map(|e| e.to_string()));
        true
    }

    /// One worker: writes whatever is queued, then waits for more, or for the next refused
    /// eviction's delay to pass; runs until dropped.
    pub async fn work(self) {
        loop {
            while self.write_one().await {}
            match self.next_retry() {
                Some(at) => {
                    tokio::select! {
                        _ = self.shared.ready.notified() => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => self.shared.ready.notified().await,
            }
        }
    }

    /// Runs `workers` workers until the returned future is dropped.
    pub async fn run(self, workers: usize) {
        let all = (0..workers.max(1)).map(|_| self.clone().work());
        futures::future::join_all(all).await;
    }
}

/// A sink that records what would be written, for tests of the writer and the loop.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Record(pub(crate) Mutex<Vec<Write>>);

#[cfg(test)]
impl Sink for Record {
    fn write<'a>(&'a self, write: &'a Write) -> BoxFuture<'a, Result<(), RequestError>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(write.clone());
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests;
