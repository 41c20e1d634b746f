//! One-shot requests to the API server: each runs under a deadline, and one classifier says
//! which failures are worth another attempt.
//!
//! Watches keep their long reads; everything else (binds, claim reads and writes, evictions,
//! status patches, events, lease calls) goes through [`within`] or [`retry`], so a request
//! that never answers is an error after the configured deadline like any other.

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum RequestError {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("no answer from the API server within {}s", .0.as_secs_f64())]
    TimedOut(Duration),
    /// A failure made up by a test hook, retried as a server error would be.
    #[error("{0}")]
    Injected(String),
    /// Not sent: this replica's Lease may pass to another before the request would end.
    #[error("not sent: this replica may no longer lead before the request would end")]
    Fenced,
}

pub type Result<T, E = RequestError> = std::result::Result<T, E>;

/// Whether repeating a request that may have reached the server does no harm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Reads, patches, replaces with a resourceVersion, evictions with a UID precondition.
    Idempotent,
    /// A create whose first attempt may have landed (a binding): a timed-out attempt is not
    /// repeated, since the server is too slow to answer; the caller decides what it means.
    Create,
}

impl RequestError {
    /// The HTTP status the API server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            RequestError::Api(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, RequestError::TimedOut(_))
    }

    /// The one classifier: too many requests, server errors, a connection that failed and
    /// injected faults are transient; a timeout is transient for idempotent operations only;
    /// every other answer (a 409 on a binding included) is final.
    pub fn is_transient(&self, operation: Operation) -> bool {
        match self {
            RequestError::TimedOut(_) => operation == Operation::Idempotent,
            RequestError::Injected(_) => true,
            RequestError::Fenced => false,
            RequestError::Api(kube::Error::Api(status)) => status.code == 429 || status.code >= 500,
            RequestError::Api(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
            RequestError::Api(_) => false,
        }
    }
}

/// A client for the API server whose requests are retried only as this module decides. The
/// client library's own retry of 429, 503 and 504 (up to 15 times, with a backoff of up to
/// minutes) is off: it would turn a PodDisruptionBudget's refusal of an eviction, or an
/// overloaded server's answer, into a request that never ends before its deadline.
/// Every request also waits for its turn under `connection`'s rate and bound on requests in
/// flight (`throttle.rs`); that wait counts against its deadline.
pub fn client(
    mut config: kube::Config,
    connection: &crate::config::ClientConnection,
) -> std::result::Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let rate = super::throttle::Rate { qps: connection.qps, burst: connection.burst };
    let in_flight = usize::try_from(connection.max_in_flight.max(1)).unwrap_or(usize::MAX);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&super::throttle::ThrottleLayer::new(rate))
        .with_layer(&tower::limit::ConcurrencyLimitLayer::new(in_flight))
        .build())
}

/// Runs one request under `deadline`.
pub async fn within<T>(
    deadline: Duration,
    request: impl Future<Output = std::result::Result<T, kube::Error>>,
) -> Result<T> {
    match tokio::time::timeout(deadline, request).await {
        Ok(result) => result.map_err(RequestError::Api),
        Err(_) => Err(RequestError::TimedOut(deadline)),
    }
}

/// How often, and how far apart, a request is tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    pub deadline: Duration,
    pub attempts: u32,
    /// Delay after the first failure, doubled after each further one.
    pub first_delay: Duration,
}

impl Retry {
    /// Five attempts from 100 ms apart, each under `deadline`.
    pub fn new(deadline: Duration) -> Retry {
        Retry { deadline, attempts: 5, first_delay: Duration::from_millis(100) }
    }
}

/// Runs `request` under the deadline until it succeeds, fails for good, or the attempts are
/// spent; only failures that are transient for `operation` are tried again.
pub async fn retry<T, F, Fut>(policy: Retry, operation: Operation, mut request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, kube::Error>>,
{
    let mut delay = policy.first_delay;
    let mut attempt = 1;
    loop {
        match within(policy.deadline, request()).await {
            Ok(value) => return Ok(value),
            Err(e) if attempt < policy.attempts && e.is_transient(operation) => {
                tracing::debug!(attempt, error = %e, "retrying a request");
            }
            Err(e) => return Err(e),
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> RequestError {
        RequestError::Api(kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed()))
    }

    #[test]
    fn one_classifier_decides_what_is_tried_again() {
        for code in [429, 500, 503] {
            assert!(api(code).is_transient(Operation::Create), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!api(code).is_transient(Operation::Idempotent), "{code} is an answer, not a fault");
        }
        let timeout = RequestError::TimedOut(Duration::from_secs(1));
        assert!(timeout.is_transient(Operation::Idempotent));
        assert!(!timeout.is_transient(Operation::Create), "a create that did not answer is not repeated");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_never_answers_fails_at_its_deadline() {
        let started = tokio::time::Instant::now();
        let never = std::future::pending::<std::result::Result<(), kube::Error>>();
        let result = within(Duration::from_secs(3), never).await;
        assert!(matches!(result, Err(RequestError::TimedOut(_))));
        assert_eq!(started.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn idempotent_requests_are_retried_through_timeouts_and_server_errors() {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let policy = Retry::new(Duration::from_secs(1));
        let result = retry(policy, Operation::Idempotent, || {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                match n {
                    0 => std::future::pending().await,
                    1 => Err(kube::Error::Api(kube::core::Status::failure("busy", "x").with_code(503).boxed())),
                    _ => Ok(n),
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 2);
        let conflict = retry(policy, Operation::Idempotent, || async {
            Err::<(), _>(kube::Error::Api(kube::core::Status::failure("taken", "x").with_code(409).boxed()))
        })
        .await;
        assert!(conflict.unwrap_err().is_conflict());
    }
}
