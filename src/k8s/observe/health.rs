//! What `/healthz` and `/readyz` say about the scheduler, from what its parts report.
//!
//! - Healthy: the scheduling loop completes the cycles it owes (work that waits longer than
//!   the stall time means the loop is wedged), and, under leader election, the replica
//!   reaches the API server (a replica cut off from it fails too, so it is restarted).
//! - Ready: the caches hold their first complete lists, and the replica leads, or stands by
//!   with the API server in reach.
//!
//! The loop marks work when it is woken and a cycle when it completes one; the informers
//! mark the caches filled or say what keeps them from it; the elector marks each round that
//! reached the API server.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// Since when the loop has owed a cycle.
    work_since: Option<Instant>,
    last_cycle: Option<Instant>,
    synced: bool,
    /// Why the caches are not filled yet, when a list failed.
    sync_problem: Option<String>,
    leading: bool,
    /// Under leader election: the last round that reached the API server.
    last_contact: Option<Instant>,
}

pub struct SchedulerHealth {
    started: Instant,
    stall: Duration,
    election: bool,
    state: Mutex<State>,
}

impl Default for SchedulerHealth {
    fn default() -> SchedulerHealth {
        SchedulerHealth::new(Duration::from_secs(60), false)
    }
}

impl SchedulerHealth {
    /// Unhealthy after `stall` of owed work (or of no contact, with `election` on).
    pub fn new(stall: Duration, election: bool) -> SchedulerHealth {
        SchedulerHealth { started: Instant::now(), stall, election, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Something changed that the loop must look at. A standby runs no loop, so it owes
    /// nothing.
    pub fn work(&self) {
        let mut state = self.state();
        if state.leading {
            state.work_since.get_or_insert_with(Instant::now);
        }
    }

    /// The loop completed a cycle: whatever it owed before starting it is done.
    pub fn cycled(&self, started: Instant) {
        let mut state = self.state();
        state.last_cycle = Some(Instant::now());
        if state.work_since.is_some_and(|since| since <= started) {
            state.work_since = None;
        }
    }

    pub fn synced(&self) {
        let mut state = self.state();
        state.synced = true;
        state.sync_problem = None;
    }

    /// A first list failed: readiness says why until the caches fill.
    pub fn sync_problem(&self, problem: String) {
        let mut state = self.state();
        if !state.synced {
            state.sync_problem = Some(problem);
        }
    }

    pub fn leading(&self, leading: bool) {
        let mut state = self.state();
        state.leading = leading;
        // A new term owes nothing of the last one.
        state.work_since = None;
    }

    /// An election round reached the API server.
    pub fn contact(&self) {
        self.state().last_contact = Some(Instant::now());
    }

    pub fn check_healthy(&self) -> Result<(), String> {
        let state = self.state();
        if let Some(since) = state.work_since
            && since.elapsed() > self.stall
        {
            return Err(format!(
                "the scheduling loop has not completed a cycle for {}s while work waits",
                since.elapsed().as_secs()
            ));
        }
        if self.election {
            let since_contact = state.last_contact.unwrap_or(self.started).elapsed();
            if since_contact > self.stall {
                return Err(format!(
                    "the API server has not answered the leader election for {}s",
                    since_contact.as_secs()
                ));
            }
        }
        Ok(())
    }

    pub fn check_ready(&self) -> Result<(), String> {
        let state = self.state();
        if !state.synced {
            return Err(match &state.sync_problem {
                Some(problem) => format!("caches not filled: {problem}"),
                None => "caches not filled yet".into(),
            });
        }
        if self.election && !state.leading {
            let in_reach = state.last_contact.is_some_and(|at| at.elapsed() <= self.stall);
            if !in_reach {
                return Err("standing by, but the API server is out of reach".into());
            }
        }
        drop(state);
        self.check_healthy()
    }
}

impl crate::metrics::Probes for SchedulerHealth {
    fn healthy(&self) -> Result<(), String> {
        self.check_healthy()
    }

    fn ready(&self) -> Result<(), String> {
        self.check_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_work_past_the_stall_time_is_unhealthy_and_a_cycle_clears_it() {
        let health = SchedulerHealth::new(Duration::from_millis(20), false);
        health.work();
        std::thread::sleep(Duration::from_millis(30));
        assert!(health.check_healthy().is_ok(), "a replica that does not lead owes no cycle");
        health.leading(true);
        assert!(health.check_healthy().is_ok(), "no work, no stall");
        health.work();
        std::thread::sleep(Duration::from_millis(30));
        let why = health.check_healthy().unwrap_err();
        assert!(why.contains("has not completed a cycle"), "{why}");
        health.cycled(Instant::now());
        assert!(health.check_healthy().is_ok());
    }

    #[test]
    fn readiness_needs_filled_caches_and_says_what_keeps_them_empty() {
        let health = SchedulerHealth::new(Duration::from_secs(10), true);
        health.sync_problem("listing ResourceSlices is forbidden".into());
        assert_eq!(health.check_ready().unwrap_err(), "caches not filled: listing ResourceSlices is forbidden");
        health.synced();
        assert!(health.check_ready().unwrap_err().contains("out of reach"), "a standby that never reached the server");
        health.contact();
        assert!(health.check_ready().is_ok());
    }

    #[test]
    fn a_replica_cut_off_from_the_api_server_is_unhealthy() {
        let health = SchedulerHealth::new(Duration::from_millis(20), true);
        health.contact();
        assert!(health.check_healthy().is_ok());
        std::thread::sleep(Duration::from_millis(30));
        assert!(health.check_healthy().unwrap_err().contains("leader election"));
    }
}
