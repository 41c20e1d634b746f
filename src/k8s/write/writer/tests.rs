//! The writer's tests: coalescing, ordering, deadlines, refusals, the fence.

use std::time::Duration;

use super::*;

fn pod(name: &str) -> PodRef {
    PodRef { namespace: "ml".into(), name: name.into(), uid: Some(format!("uid-{name}")) }
}

/// A writer that leads, over a recording sink.
fn leading_writer() -> (Arc<Record>, Writer) {
    let record = Arc::new(Record::default());
    let writer = Writer::new(record.clone(), std::time::Duration::from_secs(1), Arc::new(Metrics::new()));
    writer.set_leading(true);
    (record, writer)
}

fn unschedulable(name: &str, message: &str) -> Write {
    Write::Unschedulable { pod: pod(name), message: message.into(), unplaced: Unplaced::Unschedulable }
}

#[tokio::test]
async fn the_newest_state_per_object_wins_and_an_unchanged_one_is_not_written() {
    let (record, writer) = leading_writer();
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

fn scheduled(name: &str) -> Write {
    Write::PodEvent {
        pod: pod(name),
        warning: false,
        reason: "Scheduled".into(),
        note: format!("Successfully assigned ml/{name} to n1"),
        action: "Binding".into(),
    }
}

#[tokio::test]
async fn events_give_way_to_every_other_write_and_go_at_most_two_at_a_time() {
    let (_record, writer) = leading_writer();
    for i in 0..3 {
        writer.submit(scheduled(&format!("e{i}")));
    }
    writer.submit(unschedulable("a", "no GPU"));
    // Two events taken and not yet done: a third waits, the condition does not.
    let first = writer.take().expect("an event");
    let second = writer.take().expect("an event");
    assert!(matches!(first.1, Write::Unschedulable { .. }), "the condition queued last goes first");
    assert_eq!(second.1, scheduled("e0"));
    let third = writer.take().expect("a second event");
    assert_eq!(third.1, scheduled("e1"));
    assert!(writer.take().is_none(), "two events in flight: the third waits");
    writer.done(second.0, second.1, None);
    assert_eq!(writer.take().map(|t| t.1), Some(scheduled("e2")));
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

/// Refuses every eviction as a PodDisruptionBudget would; deletes succeed.
#[derive(Default)]
struct Budget(Mutex<Vec<(tokio::time::Instant, Write)>>);

impl Sink for Budget {
    fn write<'a>(&'a self, write: &'a Write) -> BoxFuture<'a, Result<(), RequestError>> {
        self.0.lock().unwrap().push((tokio::time::Instant::now(), write.clone()));
        let refused = matches!(write, Write::Evict { .. });
        Box::pin(async move {
            if refused {
                return Err(RequestError::Injected(
                    "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                ));
            }
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_eviction_goes_again_after_a_doubling_delay_and_ends_in_a_delete() {
    let metrics = Arc::new(Metrics::new());
    let budget = Arc::new(Budget::default());
    let policy =
        RefusalPolicy { max_refusals: 3, first_delay: Duration::from_secs(5), max_delay: Duration::from_secs(60) };
    let writer = Writer::new(budget.clone(), Duration::from_secs(1), metrics.clone()).with_refusals(policy);
    writer.set_leading(true);
    let started = tokio::time::Instant::now();
    let evict = Write::Evict { pod: pod("w-0"), gang: "ml/train".into() };
    writer.submit(evict.clone());
    let worker = tokio::spawn(writer.clone().work());
    tokio::time::sleep(Duration::from_secs(120)).await;
    let tries: Vec<(Duration, &'static str)> =
        budget.0.lock().unwrap().iter().map(|(at, w)| (*at - started, w.kind())).collect();
    let s = Duration::from_secs;
    assert_eq!(
        tries,
        [(s(0), "eviction"), (s(5), "eviction"), (s(15), "eviction"), (s(35), "pod_delete")],
        "three refusals 5 s and 10 s apart, then 20 s later a delete"
    );
    let last = budget.0.lock().unwrap()[3].1.clone();
    let Write::DeletePod { note, .. } = last else { unreachable!() };
    assert!(
        note.contains("refused 3 time(s)") && note.contains("disruption budget") && note.contains("ml/train"),
        "{note}"
    );
    assert_eq!((metrics.eviction_refusals.get(), metrics.evictions_forced.get()), (3, 1));
    // Done: the same eviction decided again is not sent again.
    writer.submit(evict);
    assert_eq!(writer.depth(), 0);
    // A new refusal starts over, and losing the lead forgets the count.
    writer.submit(Write::Evict { pod: pod("w-1"), gang: "ml/train".into() });
    tokio::time::sleep(Duration::from_secs(1)).await;
    writer.set_leading(false);
    assert!(writer.queue().refused.is_empty());
    worker.abort();
}

#[tokio::test]
async fn a_writer_behind_a_closed_fence_sends_nothing() {
    let record = Arc::new(Record::default());
    let metrics = Arc::new(Metrics::new());
    let fence = Arc::new(crate::k8s::write::fence::Fence::closed(Duration::from_secs(1)));
    let writer = Writer::new(record.clone(), Duration::from_secs(1), metrics.clone()).with_fence(fence.clone());
    writer.set_leading(true);
    writer.submit(unschedulable("a", "x"));
    assert!(writer.write_one().await);
    assert!(record.0.lock().unwrap().is_empty(), "the lease may have passed: nothing sent");
    assert_eq!(metrics.writes.with_label_values(&["pod_condition", "fenced"]).get(), 1);
    fence.renewed(tokio::time::Instant::now(), Duration::from_secs(15));
    writer.submit(unschedulable("a", "x"));
    assert!(writer.write_one().await);
    assert_eq!(record.0.lock().unwrap().len(), 1, "renewed: written");
}

#[test]
fn event_notes_are_cut_to_the_api_limit_on_a_character_boundary() {
    let long = "é".repeat(700);
    let cut = truncate_note(&long);
    assert!(cut.len() <= EVENT_NOTE_LIMIT && cut.ends_with("..."), "{}", cut.len());
    assert_eq!(truncate_note("short"), "short");
}

#[tokio::test(start_paused = true)]
async fn events_wait_while_bindings_are_in_flight_but_not_for_ever() {
    let (record, writer) = leading_writer();
    let binding = writer.binding();
    writer.submit(scheduled("e0"));
    writer.submit(unschedulable("a", "no GPU"));
    let worker = tokio::spawn(writer.clone().work());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*record.0.lock().unwrap(), [unschedulable("a", "no GPU")], "only the event waits for the binding");
    tokio::time::sleep(super::queue::HOLD).await;
    assert_eq!(record.0.lock().unwrap().len(), 2, "held as long as it may be: written though bindings go on");
    writer.submit(scheduled("e1"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(record.0.lock().unwrap().len(), 2, "a new event waits again");
    drop(binding);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(record.0.lock().unwrap().last(), Some(&scheduled("e1")), "the last binding ended: written at once");
    worker.abort();
}

#[tokio::test]
async fn statuses_wait_for_bindings_like_events_and_go_before_them() {
    let (_record, writer) = leading_writer();
    let binding = writer.binding();
    let status = Write::MusterGroup { namespace: "ml".into(), name: "train".into(), status: Default::default() };
    writer.submit(scheduled("e0"));
    writer.submit(status.clone());
    assert!(writer.take().is_none(), "a binding is in flight: the status and the event wait");
    drop(binding);
    assert_eq!(writer.take().map(|t| t.1), Some(status), "the status first, though queued after the event");
    assert_eq!(writer.take().map(|t| t.1), Some(scheduled("e0")));
}

#[tokio::test]
async fn events_past_the_bound_drop_the_oldest_and_are_counted() {
    let (record, writer) = leading_writer();
    let binding = writer.binding();
    let bound = super::queue::EVENTS_QUEUED;
    for i in 0..bound + 10 {
        writer.submit(scheduled(&format!("p{i}")));
    }
    writer.submit(unschedulable("a", "no GPU"));
    assert_eq!(writer.depth(), bound + 1, "the events are bounded; the pod condition is kept");
    let dropped = writer.shared.metrics.writes.with_label_values(&["event", "dropped"]).get();
    assert_eq!(dropped, 10);
    drop(binding);
    assert!(writer.write_one().await);
    assert!(writer.write_one().await);
    let written = record.0.lock().unwrap().clone();
    assert_eq!(written, [unschedulable("a", "no GPU"), scheduled("p10")], "the oldest ten went, the rest in order");
}

#[tokio::test]
async fn a_scheduled_event_is_not_remembered_and_a_warning_is_written_once() {
    let (record, writer) = leading_writer();
    let warning = Write::PodEvent {
        pod: pod("a"),
        warning: true,
        reason: "BindFailed".into(),
        note: "ml/train was rolled back".into(),
        action: "Evicting".into(),
    };
    writer.submit(scheduled("a"));
    writer.submit(warning.clone());
    while writer.write_one().await {}
    assert_eq!(writer.queue().written.len(), 1, "only the warning is remembered");
    writer.submit(warning);
    assert_eq!(writer.depth(), 0, "the same warning again is not written twice");
    assert_eq!(record.0.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn past_the_hold_statuses_and_events_go_one_at_a_time_while_bindings_last() {
    let (_record, writer) = leading_writer();
    let binding = writer.binding();
    let status = Write::MusterGroup { namespace: "ml".into(), name: "train".into(), status: Default::default() };
    writer.submit(status.clone());
    writer.submit(scheduled("e0"));
    writer.submit(scheduled("e1"));
    tokio::time::sleep(super::queue::HOLD).await;
    let (key, wanted, _) = writer.take().expect("held as long as it may be");
    assert_eq!(wanted, status);
    assert!(writer.take().is_none(), "one at a time while bindings are in flight");
    writer.done(key, wanted, None);
    let (key, wanted, _) = writer.take().expect("the next once the first is written");
    assert_eq!(wanted, scheduled("e0"));
    drop(binding);
    assert_eq!(writer.take().map(|t| t.1), Some(scheduled("e1")), "the burst is over: two events at a time again");
    writer.done(key, wanted, None);
}

#[tokio::test(start_paused = true)]
async fn a_worker_with_nothing_it_may_take_sleeps_rather_than_spins() {
    let (_record, writer) = leading_writer();
    let _binding = writer.binding();
    let status =
        |name: &str| Write::MusterGroup { namespace: "ml".into(), name: name.into(), status: Default::default() };
    writer.submit(status("a"));
    writer.submit(status("b"));
    tokio::time::sleep(super::queue::HOLD).await;
    let (key, wanted, _) = writer.take().expect("the first status past the hold");
    assert!(writer.take().is_none(), "the second waits for the first");
    assert_eq!(writer.next_retry(), None, "no deadline already past to wake for: the first's end wakes a worker");
    writer.done(key, wanted, None);
    assert_eq!(writer.take().map(|t| t.1), Some(status("b")));
}
