//! Write fencing: a replica writes only while no other can have taken its Lease.
//!
//! A successor takes the Lease once the holder's record has stood unchanged for the lease
//! duration as the successor observed it, so no takeover comes before the last successful
//! renewal was *sent* plus the lease duration. The fence keeps that instant; the binder and
//! the writer check it before every request, and send only one that ends, at its deadline,
//! before it. A leader that renews normally never meets the fence (the configuration makes
//! the request deadline shorter than the lease's slack); one whose election task is starved
//! or cut off stops writing on its own, before any successor starts. Without leader
//! election the fence is always open.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// `until` when no election runs: every write is allowed.
const OPEN: u64 = u64::MAX;

#[derive(Debug)]
pub struct Fence {
    epoch: Instant,
    /// Milliseconds since `epoch` before which a request must end; 0 when not leading.
    until: AtomicU64,
    /// The deadline of one request.
    request_timeout: Duration,
}

impl Fence {
    /// A fence that never closes: this replica leads alone.
    pub fn open() -> Fence {
        Fence { epoch: Instant::now(), until: AtomicU64::new(OPEN), request_timeout: Duration::ZERO }
    }

    /// A closed fence for a replica under leader election, whose requests end within
    /// `request_timeout`.
    pub fn closed(request_timeout: Duration) -> Fence {
        Fence { epoch: Instant::now(), until: AtomicU64::new(0), request_timeout }
    }

    /// A renewal sent at `sent` succeeded: no one may take over before `sent + lease_duration`.
    pub fn renewed(&self, sent: Instant, lease_duration: Duration) {
        let until = (sent + lease_duration).saturating_duration_since(self.epoch).as_millis() as u64;
        self.until.store(until.max(1), Ordering::SeqCst);
    }

    /// The lease is lost, or may be: nothing more is written.
    pub fn close(&self) {
        self.until.store(0, Ordering::SeqCst);
    }

    /// Whether a request started now ends before anyone else may lead.
    pub fn allows(&self) -> bool {
        let until = self.until.load(Ordering::SeqCst);
        if until == OPEN {
            return true;
        }
        let ends = (Instant::now() + self.request_timeout).saturating_duration_since(self.epoch).as_millis() as u64;
        ends < until
    }

    /// [`Fence::allows`] as a request's result.
    pub fn check(&self) -> Result<(), crate::k8s::client::request::RequestError> {
        if self.allows() { Ok(()) } else { Err(crate::k8s::client::request::RequestError::Fenced) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writes_stop_before_the_lease_could_pass_to_another_replica() {
        let fence = Fence::closed(Duration::from_secs(2));
        assert!(!fence.allows(), "not leading yet");
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(300)).await;
        fence.renewed(sent, Duration::from_secs(5));
        assert!(fence.allows());
        // A request started 2.9 s after the renewal was sent ends at 4.9 s: allowed; one
        // started at 3 s could end when a successor may start: refused.
        tokio::time::advance(Duration::from_millis(2_599)).await;
        assert!(fence.allows());
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(!fence.allows());
        assert!(matches!(fence.check(), Err(crate::k8s::client::request::RequestError::Fenced)));
        fence.renewed(Instant::now(), Duration::from_secs(5));
        assert!(fence.allows());
        fence.close();
        assert!(!fence.allows());
        assert!(Fence::open().allows());
    }
}
