//! Writes that are not part of a gang's transaction: pod conditions, events, PodGroup
//! status, evictions and claim releases, sent in the background so that no slow or silent
//! API server holds up a scheduling cycle.
//!
//! The queue is keyed by object: the newest wanted state per key wins, and a state equal to
//! the one last written is not written again. A few workers drain it, one write per key at
//! a time, each under the request deadline, and only while this replica leads; losing the
//! lead drops what is queued. The writes themselves are a [`Sink`], so tests use a fake one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use tokio::sync::Notify;

use super::claim_bind::Release;
use super::crd::PodGroupStatus;
use super::queue_crd::QueueStatus;
use super::request::RequestError;
use crate::metrics::Metrics;

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
    /// `PodScheduled=False` with reason Unschedulable, and a FailedScheduling event.
    Unschedulable { pod: PodRef, message: String },
    /// An event about a pod: `Scheduled`, or why it was evicted.
    PodEvent { pod: PodRef, warning: bool, reason: String, note: String, action: String },
    /// A Muster PodGroup's whole status.
    MusterGroup { namespace: String, name: String, status: PodGroupStatus },
    /// A Kubernetes PodGroup's conditions, with `PodGroupInitiallyScheduled` added.
    KubernetesGroup { namespace: String, name: String, conditions: Vec<Condition> },
    /// An eviction through the Eviction API, only of the pod with this UID.
    Evict { pod: PodRef },
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
            Write::Evict { pod } => WriteKey::Evict(pod.clone()),
            Write::ReleaseClaim(release) => {
                WriteKey::Claim(release.claim.namespace.clone(), release.claim.name.clone())
            }
            Write::Queue { name, .. } => WriteKey::Queue(name.clone()),
        }
    }

    /// The metric label of this kind of write.
    pub fn kind(&self) -> &'static str {
        match self {
            Write::Unschedulable { .. } => "pod_condition",
            Write::PodEvent { .. } => "event",
            Write::MusterGroup { .. } | Write::KubernetesGroup { .. } => "podgroup_status",
            Write::Evict { .. } => "eviction",
            Write::ReleaseClaim(_) => "claim_release",
            Write::Queue { .. } => "queue_status",
        }
    }

    /// The pod the write is about, if any.
    pub fn pod(&self) -> Option<&PodRef> {
        match self {
            Write::Unschedulable { pod, .. } | Write::PodEvent { pod, .. } | Write::Evict { pod } => Some(pod),
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

/// Where writes go: the API server, or a test's record.
pub trait Sink: Send + Sync + 'static {
    /// Performs one write; the writer has already applied the deadline.
    fn write<'a>(&'a self, write: &'a Write) -> BoxFuture<'a, Result<(), RequestError>>;
}

#[derive(Default)]
struct Queue {
    /// The newest wanted state per key not yet taken by a worker.
    pending: HashMap<WriteKey, Write>,
    /// Keys in the order they were first queued.
    order: VecDeque<WriteKey>,
    /// Keys a worker is writing now: their next state waits in `pending`.
    busy: HashSet<WriteKey>,
    /// The state last written per key, so an unchanged one is not written again.
    written: HashMap<WriteKey, Write>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Notify,
    sink: Arc<dyn Sink>,
    deadline: std::time::Duration,
    leading: AtomicBool,
    metrics: Arc<Metrics>,
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
            }),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes go out only while this is true; turning it false drops what is queued.
    pub fn set_leading(&self, leading: bool) {
        self.shared.leading.store(leading, Ordering::SeqCst);
        if !leading {
            let mut queue = self.queue();
            queue.pending.clear();
            queue.order.clear();
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
        if queue.pending.insert(key.clone(), write).is_none() {
            queue.order.push_back(key);
        }
        self.shared.metrics.write_queue_depth.set(queue.pending.len() as i64);
        drop(queue);
        self.shared.ready.notify_one();
    }

    /// Forgets what was written for keys that `keep` rejects (objects that are gone).
    pub fn retain(&self, keep: impl Fn(&WriteKey) -> bool) {
        self.queue().written.retain(|key, _| keep(key));
    }

    /// Writes queued and not yet taken by a worker.
    pub fn depth(&self) -> usize {
        self.queue().pending.len()
    }

    /// The next key a worker may take: queued, and not being written by another worker.
    /// Every key in `pending` has an entry in `order`; entries whose state was dropped
    /// meanwhile are skipped.
    fn take(&self) -> Option<(WriteKey, Write)> {
        if !self.shared.leading.load(Ordering::SeqCst) {
            return None;
        }
        let mut queue = self.queue();
        let Queue { pending, order, busy, .. } = &mut *queue;
        loop {
            let position = order.iter().position(|key| !busy.contains(key))?;
            let key = order.remove(position)?;
            if let Some(write) = pending.remove(&key) {
                busy.insert(key.clone());
                self.shared.metrics.write_queue_depth.set(pending.len() as i64);
                return Some((key, write));
            }
        }
    }

    fn done(&self, key: WriteKey, write: Write, ok: bool) {
        let mut queue = self.queue();
        queue.busy.remove(&key);
        if ok {
            queue.written.insert(key, write);
        }
        drop(queue);
        self.shared.ready.notify_one();
    }

    /// Writes one queued state, if any; false when there was none to take.
    pub async fn write_one(&self) -> bool {
        let Some((key, write)) = self.take() else { return false };
        let kind = write.kind();
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
            tracing::warn!(kind, object = ?key, error = %e, "write failed; it is decided again next cycle");
        }
        self.done(key, write, result.is_ok());
        true
    }

    /// One worker: writes whatever is queued, then waits for more; runs until dropped.
    pub async fn work(self) {
        loop {
            while self.write_one().await {}
            self.shared.ready.notified().await;
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
mod tests {
    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef { namespace: "ml".into(), name: name.into(), uid: Some(format!("uid-{name}")) }
    }

    fn unschedulable(name: &str, message: &str) -> Write {
        Write::Unschedulable { pod: pod(name), message: message.into() }
    }

    #[tokio::test]
    async fn the_newest_state_per_object_wins_and_an_unchanged_one_is_not_written() {
        let record = Arc::new(Record::default());
        let writer = Writer::new(record.clone(), std::time::Duration::from_secs(1), Arc::new(Metrics::new()));
        writer.set_leading(true);
        for i in 0..10 {
            writer.submit(unschedulable("a", &format!("reason {i}")));
        }
        writer.submit(unschedulable("b", "no GPU"));
        while writer.write_one().await {}
        assert_eq!(*record.0.lock().unwrap(), vec![unschedulable("a", "reason 9"), unschedulable("b", "no GPU")]);
        writer.submit(unschedulable("a", "reason 9"));
        assert_eq!(writer.depth(), 0, "the state already written is not queued again");
        writer.submit(unschedulable("a", "reason 10"));
        while writer.write_one().await {}
        assert_eq!(record.0.lock().unwrap().len(), 3);
        // A change taken back before it was written is not written, and does not hold up
        // the writes queued after it.
        writer.submit(unschedulable("a", "reason 11"));
        writer.submit(unschedulable("a", "reason 10"));
        writer.submit(unschedulable("b", "now it fits nowhere"));
        while writer.write_one().await {}
        let written = record.0.lock().unwrap().clone();
        assert_eq!(written[3..], [unschedulable("b", "now it fits nowhere")]);
    }

    #[tokio::test]
    async fn nothing_is_written_after_the_lead_is_lost() {
        let record = Arc::new(Record::default());
        let writer = Writer::new(record.clone(), std::time::Duration::from_secs(1), Arc::new(Metrics::new()));
        writer.submit(unschedulable("a", "before leading"));
        assert_eq!(writer.depth(), 0, "a standby queues nothing");
        writer.set_leading(true);
        writer.submit(unschedulable("a", "queued"));
        writer.set_leading(false);
        writer.submit(unschedulable("b", "after"));
        assert!(!writer.write_one().await);
        assert!(record.0.lock().unwrap().is_empty());
    }

    struct Silent;

    impl Sink for Silent {
        fn write<'a>(&'a self, _: &'a Write) -> BoxFuture<'a, Result<(), RequestError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_answers_times_out_and_is_counted() {
        let metrics = Arc::new(Metrics::new());
        let writer = Writer::new(Arc::new(Silent), std::time::Duration::from_secs(2), metrics.clone());
        writer.set_leading(true);
        writer.submit(unschedulable("a", "x"));
        assert!(writer.write_one().await);
        assert_eq!(metrics.writes.with_label_values(&["pod_condition", "timed_out"]).get(), 1);
        writer.submit(unschedulable("a", "x"));
        assert_eq!(writer.depth(), 1, "a state that was never written is tried again");
    }

    #[test]
    fn event_notes_are_cut_to_the_api_limit_on_a_character_boundary() {
        let long = "é".repeat(700);
        let cut = truncate_note(&long);
        assert!(cut.len() <= EVENT_NOTE_LIMIT && cut.ends_with("..."), "{}", cut.len());
        assert_eq!(truncate_note("short"), "short");
    }
}
