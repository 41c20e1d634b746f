//! Client-side limits on what Muster asks of the API server, as kube-scheduler's
//! `clientConnection.qps` and `burst`: a token bucket every request passes (`burst` at once,
//! then `qps` a second), and a bound on requests in flight at once. Both sit in the client's
//! service stack, so every request (binds, claim writes, evictions, status, events, reads)
//! waits its turn, and that wait counts against the request's own deadline.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Tokens a second and the most at once; `qps <= 0` lets every request through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub qps: f64,
    pub burst: u32,
}

/// A token bucket: full (`burst` tokens) at first, refilled at `qps` a second.
#[derive(Debug)]
struct Bucket {
    rate: Rate,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: Rate) -> Bucket {
        Bucket { rate, tokens: f64::from(rate.burst.max(1)), last: Instant::now() }
    }

    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let capacity = f64::from(self.rate.burst.max(1));
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate.qps).min(capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate.qps))
        }
    }
}

/// The layer: wraps the client's service in the bucket.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleLayer {
    rate: Rate,
}

impl ThrottleLayer {
    pub fn new(rate: Rate) -> ThrottleLayer {
        ThrottleLayer { rate }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        let bucket = (self.rate.qps > 0.0).then(|| Bucket::new(self.rate));
        Throttle { inner, bucket, sleep: None, granted: false }
    }
}

/// A service that is ready only once the bucket grants a token.
pub struct Throttle<S> {
    inner: S,
    bucket: Option<Bucket>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token is held for the next call.
    granted: bool,
}

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if let Some(bucket) = self.bucket.as_mut() {
            while !self.granted {
                if let Some(sleep) = self.sleep.as_mut() {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.sleep = None;
                }
                match bucket.take(Instant::now()) {
                    Ok(()) => self.granted = true,
                    Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.granted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tower::{ServiceBuilder, ServiceExt};

    use super::*;

    /// When each of `n` requests reached the inner service, in seconds from the start.
    async fn arrivals(rate: Rate, n: usize) -> Vec<f64> {
        let start = Instant::now();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let inner = tower::service_fn(move |_: ()| {
            record.lock().unwrap().push(start.elapsed().as_secs_f64());
            async { Ok::<_, std::convert::Infallible>(()) }
        });
        let mut service = ThrottleLayer::new(rate).layer(inner);
        for _ in 0..n {
            service.ready().await.unwrap().call(()).await.unwrap();
        }
        seen.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let times = arrivals(Rate { qps: 5.0, burst: 2 }, 6).await;
        let rounded: Vec<f64> = times.iter().map(|t| (t * 100.0).round() / 100.0).collect();
        assert_eq!(rounded, [0.0, 0.0, 0.2, 0.4, 0.6, 0.8]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_rate_lets_everything_through_at_once() {
        let times = arrivals(Rate { qps: 0.0, burst: 0 }, 100).await;
        assert!(times.iter().all(|&t| t == 0.0), "{times:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_never_pass_the_bound() {
        let now = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (n, m) = (now.clone(), most.clone());
        let inner = tower::service_fn(move |_: ()| {
            let (n, m) = (n.clone(), m.clone());
            async move {
                let level = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(level, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(())
            }
        });
        let service = ServiceBuilder::new()
            .buffer(64)
            .concurrency_limit(4)
            .layer(ThrottleLayer::new(Rate { qps: 0.0, burst: 0 }))
            .service(inner);
        let calls: Vec<_> = (0..20).map(|_| service.clone().oneshot(())).collect();
        for result in futures::future::join_all(calls).await {
            result.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 4);
    }
}
