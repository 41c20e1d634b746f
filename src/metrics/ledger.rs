//! The usage ledger: GPU-seconds and GPU-memory-byte-seconds per queue and namespace,
//! integrated from the pods Muster bound while they hold their GPUs, exported as the
//! counters `muster_gpu_seconds_total` and `muster_gpu_memory_byte_seconds_total`.
//!
//! The scheduler's housekeeping tells the ledger which pods hold GPUs now ([`Ledger::update`]);
//! a pod accrues from when it was bound (never before the ledger started, since a counter
//! starts at zero with its process) until a pass finds it gone or finished. A scrape reads
//! the totals at that instant, so the counters are exact between passes too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc, Describer};
use prometheus::proto::MetricFamily;
use prometheus::{CounterVec, Opts};

pub const GPU_SECONDS: &str = "muster_gpu_seconds_total";
pub const GPU_MEMORY_SECONDS: &str = "muster_gpu_memory_byte_seconds_total";
const LABELS: &[&str] = &["queue", "namespace"];

/// A pod holding GPUs now, as housekeeping sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// Its uid: one entry per pod, whatever its name.
    pub uid: String,
    pub queue: String,
    pub namespace: String,
    /// GPUs it holds: whole devices, or the fraction of one it shares.
    pub gpus: f64,
    /// Bytes of GPU memory its shares consume (0 for whole GPUs).
    pub memory: f64,
    /// When it was bound, in Unix seconds.
    pub bound: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Totals {
    gpu_seconds: f64,
    memory_seconds: f64,
}

#[derive(Debug, Default)]
struct Books {
    started: f64,
    open: HashMap<String, (Holding, f64)>,
    /// Accrued by pods no longer open, and by open ones up to their `since`.
    totals: HashMap<(String, String), Totals>,
}

impl Books {
    /// Moves what `holding` accrued from `since` to `now` into the totals.
    fn accrue(totals: &mut HashMap<(String, String), Totals>, holding: &Holding, since: f64, now: f64) {
        let seconds = (now - since).max(0.0);
        let entry = totals.entry((holding.queue.clone(), holding.namespace.clone())).or_default();
        entry.gpu_seconds += holding.gpus * seconds;
        entry.memory_seconds += holding.memory * seconds;
    }

    /// The totals as of `now`, open pods included.
    fn at(&self, now: f64) -> HashMap<(String, String), Totals> {
        let mut totals = self.totals.clone();
        for (holding, since) in self.open.values() {
            Books::accrue(&mut totals, holding, *since, now);
        }
        totals
    }
}

/// The ledger, shared by housekeeping (which updates it) and the registry (which reads it).
#[derive(Clone)]
pub struct Ledger {
    books: Arc<Mutex<Books>>,
    descs: Vec<Desc>,
}

impl Ledger {
    /// An empty ledger that counts from `started` (Unix seconds).
    pub fn new(started: f64) -> Ledger {
        let descs = [GPU_SECONDS, GPU_MEMORY_SECONDS]
            .iter()
            .map(|name| {
                let opts = Opts::new(*name, help(name)).variable_labels(LABELS.iter().map(|l| l.to_string()).collect());
                opts.describe().expect("a valid metric description")
            })
            .collect();
        Ledger { books: Arc::new(Mutex::new(Books { started, ..Books::default() })), descs }
    }

    /// The pods holding GPUs at `now`: new ones open from when they were bound, ones no
    /// longer listed close at `now`, and a pod whose holding changed (resized, requeued)
    /// closes its old entry and opens the new one at `now`.
    pub fn update(&self, holdings: Vec<Holding>, now: f64) {
        let mut books = self.books.lock().expect("the ledger's lock");
        let Books { started, open, totals } = &mut *books;
        let mut next: HashMap<String, (Holding, f64)> = HashMap::with_capacity(holdings.len());
        for holding in holdings {
            let since = match open.remove(&holding.uid) {
                Some((old, since)) if old == holding => since,
                Some((old, since)) => {
                    Books::accrue(totals, &old, since, now);
                    now
                }
                None => holding.bound.max(*started).min(now),
            };
            next.insert(holding.uid.clone(), (holding, since));
        }
        for (old, since) in open.values() {
            Books::accrue(totals, old, *since, now);
        }
        *open = next;
    }

    /// A term as leader begins at `now`: pods count from then on (what they used before
    /// is the last leader's to count).
    pub fn begin(&self, now: f64) {
        let mut books = self.books.lock().expect("the ledger's lock");
        books.started = now;
    }

    /// The term ends at `now`: every open pod stops accruing here (the next leader counts
    /// them from when it begins).
    pub fn end(&self, now: f64) {
        self.update(Vec::new(), now);
    }

    /// GPU-seconds and GPU-memory-byte-seconds per (queue, namespace), as of `now`.
    pub fn totals(&self, now: f64) -> Vec<((String, String), f64, f64)> {
        let books = self.books.lock().expect("the ledger's lock");
        let mut out: Vec<_> = books.at(now).into_iter().map(|(k, t)| (k, t.gpu_seconds, t.memory_seconds)).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

fn help(name: &str) -> &'static str {
    if name == GPU_SECONDS {
        "GPU-seconds used by pods Muster bound, by queue and namespace: whole GPUs count 1 a second, a fraction its share (KAI's gpu-fraction, or the part of the GPU's memory it holds)."
    } else {
        "GPU memory held by shares of GPUs (GPU fractions), in byte-seconds, by queue and namespace."
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl Collector for Ledger {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let vec = |name: &str| CounterVec::new(Opts::new(name, help(name)), LABELS).expect("a valid counter");
        let (gpus, memory) = (vec(GPU_SECONDS), vec(GPU_MEMORY_SECONDS));
        for ((queue, namespace), gpu_seconds, memory_seconds) in self.totals(unix_now()) {
            gpus.with_label_values(&[&queue, &namespace]).inc_by(gpu_seconds);
            if memory_seconds > 0.0 {
                memory.with_label_values(&[&queue, &namespace]).inc_by(memory_seconds);
            }
        }
        let mut families = gpus.collect();
        families.extend(memory.collect());
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(uid: &str, queue: &str, gpus: f64, bound: f64) -> Holding {
        Holding { uid: uid.into(), queue: queue.into(), namespace: "ml".into(), gpus, memory: 0.0, bound }
    }

    fn gpu_seconds(ledger: &Ledger, queue: &str, now: f64) -> f64 {
        ledger.totals(now).into_iter().find(|(k, ..)| k.0 == queue).map_or(0.0, |(_, g, _)| g)
    }

    #[test]
    fn pods_accrue_from_their_binding_until_they_are_gone_never_before_the_ledger_started() {
        let ledger = Ledger::new(1000.0);
        // Bound before the ledger started: counted from its start.
        ledger.update(vec![holding("a", "team-a", 8.0, 900.0), holding("b", "team-b", 0.5, 1010.0)], 1020.0);
        assert_eq!(gpu_seconds(&ledger, "team-a", 1020.0), 8.0 * 20.0);
        assert_eq!(gpu_seconds(&ledger, "team-b", 1020.0), 0.5 * 10.0);
        // Read between passes: exact at that instant.
        assert_eq!(gpu_seconds(&ledger, "team-a", 1030.0), 8.0 * 30.0);
        // b is gone at 1040: it stops accruing; a goes on.
        ledger.update(vec![holding("a", "team-a", 8.0, 900.0)], 1040.0);
        assert_eq!(gpu_seconds(&ledger, "team-b", 1100.0), 0.5 * 30.0);
        assert_eq!(gpu_seconds(&ledger, "team-a", 1100.0), 8.0 * 100.0);
        // a moves to another queue: what it used stays where it was used.
        ledger.update(vec![holding("a", "team-b", 8.0, 900.0)], 1100.0);
        assert_eq!(gpu_seconds(&ledger, "team-a", 1200.0), 8.0 * 100.0);
        assert_eq!(gpu_seconds(&ledger, "team-b", 1200.0), 0.5 * 30.0 + 8.0 * 100.0);
    }

    #[test]
    fn a_term_counts_only_while_it_leads() {
        let ledger = Ledger::new(0.0);
        ledger.begin(100.0);
        ledger.update(vec![holding("a", "team-a", 2.0, 50.0)], 110.0);
        ledger.end(120.0);
        assert_eq!(gpu_seconds(&ledger, "team-a", 500.0), 2.0 * 20.0, "from the term's start to its end");
        ledger.begin(600.0);
        ledger.update(vec![holding("a", "team-a", 2.0, 50.0)], 610.0);
        assert_eq!(gpu_seconds(&ledger, "team-a", 700.0), 2.0 * 20.0 + 2.0 * 100.0);
    }

    #[test]
    fn the_counters_are_scraped_with_queue_and_namespace_labels() {
        let ledger = Ledger::new(0.0);
        let mut share = holding("n", "notebooks", 0.5, 0.0);
        share.memory = 40.0 * (1u64 << 30) as f64;
        ledger.update(vec![share], 1.0);
        let families = ledger.collect();
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        assert_eq!(names, [GPU_SECONDS, GPU_MEMORY_SECONDS]);
        let metric = &families[0].get_metric()[0];
        let labels: Vec<(&str, &str)> = metric.get_label().iter().map(|l| (l.name(), l.value())).collect();
        assert_eq!(labels, [("namespace", "ml"), ("queue", "notebooks")]);
        assert!(metric.get_counter().value() >= 0.5, "half a GPU for at least a second");
    }
}
