//! A progress line on stderr while replays run, when stderr is a terminal: the simulated
//! time each policy has reached and the jobs it has started.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

/// Shared by the replays (one slot each) and the thread that draws the line.
pub struct Progress {
    reached: Vec<AtomicI64>,
    started: Vec<AtomicUsize>,
    horizon: i64,
    jobs: usize,
    done: AtomicBool,
}

impl Progress {
    pub fn new(slots: usize, horizon: i64, jobs: usize) -> Progress {
        Progress {
            reached: (0..slots).map(|_| AtomicI64::new(0)).collect(),
            started: (0..slots).map(|_| AtomicUsize::new(0)).collect(),
            horizon,
            jobs,
            done: AtomicBool::new(false),
        }
    }

    pub fn report(&self, slot: usize, now: i64, started: usize) {
        self.reached[slot].store(now, Ordering::Relaxed);
        self.started[slot].store(started, Ordering::Relaxed);
    }

    /// The line: the slowest replay's simulated time and the jobs each has started.
    pub fn line(&self) -> String {
        let slowest = self.reached.iter().map(|r| r.load(Ordering::Relaxed)).min().unwrap_or(0);
        let started: Vec<String> = self.started.iter().map(|s| s.load(Ordering::Relaxed).to_string()).collect();
        let share = if self.horizon > 0 { 100 * slowest.min(self.horizon) / self.horizon } else { 100 };
        format!(
            "replaying: {:.0} h of {:.0} h simulated ({share}%), jobs started per policy: {} of {}",
            slowest as f64 / 3600.0,
            self.horizon as f64 / 3600.0,
            started.join(" / "),
            self.jobs
        )
    }

    /// Runs `work` while a thread redraws the line every 200 ms, when stderr is a terminal.
    pub fn around<R>(&self, work: impl FnOnce() -> R) -> R {
        if !std::io::stderr().is_terminal() {
            return work();
        }
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !self.done.load(Ordering::Relaxed) {
                    eprint!("\r{}\x1b[K", self.line());
                    let _ = std::io::stderr().flush();
                    std::thread::sleep(Duration::from_millis(200));
                }
                eprint!("\r\x1b[K");
            });
            let result = work();
            self.done.store(true, Ordering::Relaxed);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_follows_the_slowest_replay() {
        let progress = Progress::new(2, 10 * 3600, 500);
        progress.report(0, 5 * 3600, 120);
        progress.report(1, 2 * 3600, 80);
        assert_eq!(progress.line(), "replaying: 2 h of 10 h simulated (20%), jobs started per policy: 120 / 80 of 500");
    }
}
