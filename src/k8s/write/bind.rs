//! Binds a placed gang as one transaction: its claims written first (concurrently, at most
//! as many at once as its binds), then its claims that wait for their first consumer given
//! their nodes, and once all of those are bound ([`volumes`]) and every device with binding
//! conditions is ready ([`devices`]), every pod through pods/binding, concurrently,
//! each retrying transient errors; if fewer than the gang's minimum end up bound, the bound
//! ones are evicted (Eviction API) so that no gang sits on part of its GPUs.
//!
//! Kubernetes has no transaction across objects and a bound pod cannot be unbound, so
//! eviction is the only undo: the pods' controllers recreate them and the gang is retried.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use thiserror::Error;

use crate::engine::dra::model::ClaimKey;
use crate::engine::model::{GangKey, PodKey};
use crate::k8s::client::{
    request,
    request::{Operation, RequestError, Retry},
};
use crate::k8s::write::{
    claims,
    claims::{ClaimDone, ClaimWrite},
    devices,
    remove::evict,
    volumes,
    volumes::VolumeWrite,
};

/// What a test hook tells the binder to do before one bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookAction {
    Proceed,
    /// Fail this bind permanently with the message.
    Fail(String),
    /// Fail this attempt as a transient (retryable) error, then proceed.
    FailOnce,
    /// Wait this long before binding (to stop the scheduler mid-gang).
    Pause(Duration),
    /// Send nothing and never answer: the bind request hangs as on a silent API server.
    Hang,
    /// Send the write, which lands, and lose its answer, as when the connection drops after
    /// the server wrote it: the first attempt fails as a timeout would.
    LoseAnswer,
}

/// A test-only hook into the binder; production runs have none.
pub trait BindHook: Send + Sync {
    /// Called before each bind of a gang's pods; `index` counts binds of this gang from 0.
    fn before_bind(&self, gang: &GangKey, index: usize, pod: &PodKey) -> HookAction;

    /// Called before each claim of the gang is written.
    fn before_claim(&self, _gang: &GangKey, _claim: &ClaimKey) -> HookAction {
        HookAction::Proceed
    }
}

/// A gang to bind: its pods with their nodes, and how many must be bound for it to stand.
#[derive(Clone, Debug)]
pub struct GangBinding {
    pub gang: GangKey,
    /// The queue it is admitted through, for the usage figures.
    pub queue: String,
    /// Pods that must be bound in this transaction (minMember less those already bound).
    pub needed: usize,
    /// The gang's minMember, and its creation time (Unix seconds), for its waiting time.
    pub min_member: usize,
    pub created: i64,
    pub pods: Vec<(PodKey, String)>,
    /// The UID each pod had when it was placed: a pod recreated under the same name (a
    /// StatefulSet's) is neither bound to the old placement nor evicted by mistake.
    pub uids: std::collections::HashMap<PodKey, String>,
    /// Claims to allocate or reserve before any pod is bound.
    pub claims: Vec<ClaimWrite>,
    /// Claims that wait for their first consumer, given their pods' nodes: every one is
    /// bound to a volume before any pod is bound.
    pub volumes: Vec<VolumeWrite>,
    /// Placed opportunistically in capacity held for this gang's reservation: every pod
    /// is bound with [`super::view::OPPORTUNISTIC_ANNOTATION`], so that later cycles (and a
    /// restarted scheduler) know the gang leaves when that gang can start.
    pub opportunistic: Option<GangKey>,
}

/// Why one step of a gang's transaction failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BindError {
    #[error("binding pod {pod} to node {node} failed: {reason}")]
    Bind { pod: PodKey, node: String, reason: String },
    #[error("{0}")]
    Claim(String),
    #[error("{0}")]
    Volume(String),
    #[error("{0}")]
    Devices(String),
    #[error("{0}")]
    Injected(String),
    #[error("evicting pod {pod} failed: {reason}")]
    Evict { pod: PodKey, reason: String },
    /// The binding task panicked or was cancelled: what it did is unknown, so it counts as
    /// rolled back, and the safety net evicts whatever of it the watch shows bound.
    #[error("the binding of {gang} ended without an outcome: {reason}")]
    Lost { gang: GangKey, reason: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// At least `needed` pods are bound; `failed` pods (beyond the minimum) go back to pending.
    Bound { bound: Vec<PodKey>, failed: Vec<(PodKey, BindError)> },
    /// Too few pods were bound: those that were have been evicted.
    RolledBack { evicted: Vec<PodKey>, errors: Vec<(PodKey, BindError)> },
}

/// Binds gangs: the real [`Binder`], or a test's fake.
pub trait Bind: Send + Sync + 'static {
    fn bind(self: Arc<Self>, binding: GangBinding) -> BoxFuture<'static, BindOutcome>;
}

/// Binds and claim writes in flight at once when nothing else is configured.
const DEFAULT_IN_FLIGHT: usize = 128;

pub struct Binder {
    client: kube::Client,
    hook: Option<Arc<dyn BindHook>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Pods of one gang bound at once.
    concurrency: usize,
    /// Requests of every gang in flight at once (binds and claim writes). A request waits
    /// for its permit before its deadline starts: placed gangs queue here, not inside the
    /// client, where waiting would count against the deadline and time binds out.
    permits: Arc<tokio::sync::Semaphore>,
    retry: Retry,
    /// Checked before every claim write, bind and eviction.
    fence: Option<Arc<super::fence::Fence>>,
    /// How long a gang's delayed claims may take to be bound.
    volume_timeout: Duration,
    /// How long devices with binding conditions may take to be ready.
    device_timeout: Duration,
}

impl Bind for Binder {
    fn bind(self: Arc<Self>, binding: GangBinding) -> BoxFuture<'static, BindOutcome> {
        Box::pin(async move { self.bind_gang(&binding).await })
    }
}

impl Binder {
    /// A binder whose every request answers within `deadline` or counts as failed.
    pub fn new(client: kube::Client, hook: Option<Arc<dyn BindHook>>, deadline: Duration) -> Binder {
        Binder {
            client,
            hook,
            metrics: None,
            concurrency: 32,
            permits: Arc::new(tokio::sync::Semaphore::new(DEFAULT_IN_FLIGHT)),
            retry: Retry::new(deadline),
            fence: None,
            volume_timeout: Duration::from_secs(600),
            device_timeout: Duration::from_secs(600),
        }
    }

    /// Delayed claims not bound within `timeout` roll their gang back.
    pub fn with_volume_timeout(mut self, timeout: Duration) -> Binder {
        self.volume_timeout = timeout;
        self
    }

    /// Devices whose binding conditions are not met within `timeout` of their allocation
    /// roll their gang back.
    pub fn with_device_timeout(mut self, timeout: Duration) -> Binder {
        self.device_timeout = timeout;
        self
    }

    /// At most `requests` binds and claim writes in flight, over every gang.
    pub fn with_in_flight(mut self, requests: usize) -> Binder {
        self.permits = Arc::new(tokio::sync::Semaphore::new(requests.max(1)));
        self
    }

    /// Sends nothing that could end after this replica's Lease may have passed to another.
    pub fn with_fence(mut self, fence: Arc<super::fence::Fence>) -> Binder {
        self.fence = Some(fence);
        self
    }

    fn fenced(&self) -> Result<(), RequestError> {
        self.fence.as_ref().map_or(Ok(()), |f| f.check())
    }

    /// Records how long claim writes take in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Binder {
        self.metrics = Some(metrics);
        self
    }

    pub async fn bind_gang(&self, binding: &GangBinding) -> BindOutcome {
        let gang = &binding.gang;
        // Every claim first, concurrently (bounded as the binds are): a gang whose claims
        // cannot all be written binds no pod, and what was written is undone.
        let claims_started = std::time::Instant::now();
        let writes = (0..binding.claims.len()).map(|i| async move {
            let write = &binding.claims[i];
            let _permit = self.permits.acquire().await;
            let hooked = match self.hook.as_ref().map(|h| h.before_claim(gang, &write.claim)) {
                _ if self.fenced().is_err() => Err(RequestError::Fenced.to_string()),
                Some(HookAction::Fail(message)) => Err(message),
                Some(HookAction::LoseAnswer) => claims::write(&self.client, self.retry, write, true).await,
                _ => claims::write(&self.client, self.retry, write, false).await,
            };
            (write, hooked)
        });
        let answers: Vec<_> = futures::stream::iter(writes).buffered(self.concurrency).collect().await;
        let mut written: Vec<ClaimDone> = Vec::with_capacity(binding.claims.len());
        let mut failed = None;
        for (write, answer) in answers {
            match answer {
                Ok(done) => written.push(done),
                Err(error) => failed = failed.or(Some((write.pod.clone(), BindError::Claim(error)))),
            }
        }
        if let Some(failed) = failed {
            self.undo_claims(&written, &Default::default()).await;
            return BindOutcome::RolledBack { evicted: Vec::new(), errors: vec![failed] };
        }
        if let Some(metrics) = self.metrics.as_ref().filter(|_| !binding.claims.is_empty()) {
            metrics.device_allocation_duration.observe(claims_started.elapsed().as_secs_f64());
        }
        if let Err(failed) = self.before_pods(binding, &mut written).await {
            return BindOutcome::RolledBack { evicted: Vec::new(), errors: vec![failed] };
        }
        let binds: Vec<_> = binding
            .pods
            .iter()
            .cloned()
            .enumerate()
            .map(|(index, (pod, node))| async move {
                let uid = binding.uids.get(&pod).map(String::as_str);
                let opportunistic = binding.opportunistic.is_some();
                let result = self.bind_pod(gang, index, &pod, &node, uid, opportunistic).await;
                (pod, result)
            })
            .collect();
        let results: Vec<(PodKey, Result<(), BindError>)> =
            futures::stream::iter(binds).buffer_unordered(self.concurrency).collect().await;
        let mut bound = Vec::new();
        let mut errors = Vec::new();
        for (pod, result) in results {
            match result {
                Ok(()) => bound.push(pod),
                Err(e) => errors.push((pod, e)),
            }
        }
        // Pods that did not bind give their reservations back; bound pods keep theirs until
        // they are gone.
        let keep: std::collections::HashSet<String> =
            bound.iter().filter_map(|p| binding.uids.get(p).cloned()).collect();
        if !errors.is_empty() {
            self.undo_claims(&written, &keep).await;
        }
        if bound.len() >= binding.needed {
            return BindOutcome::Bound { bound, failed: errors };
        }
        let mut evicted = Vec::new();
        for pod in bound {
            let uid = binding.uids.get(&pod).map(String::as_str);
            let result = match self.fenced() {
                Ok(()) => evict(&self.client, self.retry, &pod, uid).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => evicted.push(pod),
                Err(e) => errors.push((pod.clone(), BindError::Evict { pod, reason: e.to_string() })),
            }
        }
        BindOutcome::RolledBack { evicted, errors }
    }

    /// Once the claims are written: their delayed volumes bound, then their devices' binding
    /// conditions met. On failure, undoes what the transaction wrote (and deallocates the
    /// claims whose devices were waited on) and says which pod's step failed.
    async fn before_pods(&self, binding: &GangBinding, written: &mut [ClaimDone]) -> Result<(), (PodKey, BindError)> {
        let fenced = || self.fenced();
        if !binding.volumes.is_empty() {
            let bound = volumes::bind(&self.client, self.retry, &fenced, &binding.volumes, self.volume_timeout).await;
            if let Err(why) = bound {
                volumes::undo(&self.client, self.retry, &fenced, &binding.volumes).await;
                self.undo_claims(written, &Default::default()).await;
                return Err((binding.volumes[0].pod.clone(), BindError::Volume(why)));
            }
        }
        let waited: Vec<usize> = (0..written.len()).filter(|&i| devices::waits(&binding.claims[i])).collect();
        if waited.is_empty() {
            return Ok(());
        }
        let claims: Vec<&ClaimDone> = waited.iter().map(|&i| &written[i]).collect();
        let Err(why) = devices::wait(&self.client, self.retry, &fenced, &claims, self.device_timeout).await else {
            return Ok(());
        };
        volumes::undo(&self.client, self.retry, &fenced, &binding.volumes).await;
        for &i in &waited {
            written[i].allocated = true;
        }
        self.undo_claims(written, &Default::default()).await;
        Err((binding.claims[waited[0]].pod.clone(), BindError::Devices(why)))
    }

    /// Undoes the claim writes, newest first, keeping the reservations of the pods whose
    /// UIDs are in `keep`.
    async fn undo_claims(&self, written: &[ClaimDone], keep: &std::collections::HashSet<String>) {
        for done in written.iter().rev() {
            claims::undo(&self.client, self.retry, done, keep).await;
        }
    }

    async fn bind_pod(
        &self,
        gang: &GangKey,
        index: usize,
        pod: &PodKey,
        node: &str,
        uid: Option<&str>,
        opportunistic: bool,
    ) -> Result<(), BindError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let mut injected_transient = false;
        let mut hang = false;
        let mut lose_answer = false;
        if let Some(hook) = &self.hook {
            match hook.before_bind(gang, index, pod) {
                HookAction::Proceed => {}
                HookAction::Fail(message) => return Err(BindError::Injected(message)),
                HookAction::FailOnce => injected_transient = true,
                HookAction::Pause(duration) => tokio::time::sleep(duration).await,
                HookAction::Hang => hang = true,
                HookAction::LoseAnswer => lose_answer = true,
            }
        }
        let body = binding_body(pod, node, uid, opportunistic);
        let params = PostParams::default();
        let failed =
            |e: RequestError| BindError::Bind { pod: pod.clone(), node: node.to_string(), reason: e.to_string() };
        let mut delay = self.retry.first_delay;
        for attempt in 1..=self.retry.attempts {
            let permit = self.permits.acquire().await;
            let result = if let Err(e) = self.fenced() {
                Err(e)
            } else if injected_transient && attempt == 1 {
                Err(RequestError::Injected("injected transient error".into()))
            } else if hang && attempt == 1 {
                request::within(self.retry.deadline, std::future::pending::<Result<(), kube::Error>>()).await
            } else {
                let post = pods.create_subresource::<_, serde_json::Value>("binding", &pod.name, &params, &body);
                match request::within(self.retry.deadline, post).await {
                    Ok(_) if lose_answer && attempt == 1 => Err(RequestError::TimedOut(self.retry.deadline)),
                    result => result.map(|_| ()),
                }
            };
            let Err(e) = result else { return Ok(()) };
            // A lost response can leave the pod bound already: that is success.
            if let Ok(current) = request::within(self.retry.deadline, pods.get(&pod.name)).await
                && current.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
            {
                return Ok(());
            }
            drop(permit);
            if !e.is_transient(Operation::Create) || attempt == self.retry.attempts {
                return Err(failed(e));
            }
            tracing::debug!(%pod, node, attempt, error = %e, "retrying bind");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
        unreachable!("the last attempt returns")
    }
}

/// The Binding of `pod` to `node`. The API server copies a Binding's annotations onto the
/// pod in the same write, so the opportunistic marker lands with the binding itself.
fn binding_body(pod: &PodKey, node: &str, uid: Option<&str>, opportunistic: bool) -> serde_json::Value {
    let mut metadata = json!({"name": pod.name, "namespace": pod.namespace, "uid": uid});
    if opportunistic {
        metadata["annotations"] = json!({crate::convert::view::OPPORTUNISTIC_ANNOTATION: "true"});
    }
    json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::GangKind;

    #[tokio::test(start_paused = true)]
    async fn a_binder_behind_a_closed_fence_sends_no_bind() {
        // Nothing listens there: a request that were sent would fail otherwise.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let fence = Arc::new(super::super::fence::Fence::closed(Duration::from_secs(1)));
        let binder = Binder::new(client, None, Duration::from_secs(1)).with_fence(fence);
        let pod = PodKey { namespace: "ml".into(), name: "p-0".into() };
        let binding = GangBinding {
            gang: GangKey { kind: GangKind::Single, namespace: "ml".into(), name: "p-0".into() },
            queue: "default".into(),
            needed: 1,
            min_member: 1,
            created: 0,
            pods: vec![(pod.clone(), "n1".into())],
            uids: Default::default(),
            claims: Vec::new(),
            volumes: Vec::new(),
            opportunistic: None,
        };
        let BindOutcome::RolledBack { evicted, errors } = binder.bind_gang(&binding).await else {
            panic!("nothing may be bound")
        };
        assert!(evicted.is_empty());
        let reason = errors[0].1.to_string();
        assert!(reason.contains("not sent: this replica may no longer lead"), "{reason}");
    }

    #[test]
    fn an_opportunistic_binding_carries_the_marker_the_api_server_copies_onto_the_pod() {
        let pod = PodKey { namespace: "ml".into(), name: "p-0".into() };
        let body = binding_body(&pod, "n1", Some("uid-1"), true);
        assert_eq!(body["metadata"]["annotations"]["muster.dev/opportunistic"], "true");
        assert_eq!((body["metadata"]["uid"].as_str(), body["target"]["name"].as_str()), (Some("uid-1"), Some("n1")));
        let plain = binding_body(&pod, "n1", Some("uid-1"), false);
        assert!(plain["metadata"].get("annotations").is_none());
    }

    /// An API server that answers every request after 100 ms, counting how many it holds at
    /// once, behind a client that sends four at a time (as `maxInFlight` does).
    fn slow_server(
        held: Arc<std::sync::atomic::AtomicUsize>,
        most: Arc<std::sync::atomic::AtomicUsize>,
    ) -> kube::Client {
        use std::sync::atomic::Ordering::SeqCst;
        let service = tower::service_fn(move |_request: http::Request<kube::client::Body>| {
            let (held, most) = (held.clone(), most.clone());
            async move {
                most.fetch_max(held.fetch_add(1, SeqCst) + 1, SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                held.fetch_sub(1, SeqCst);
                let body = br#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#.to_vec();
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(body)))
            }
        });
        kube::Client::new(tower::ServiceBuilder::new().concurrency_limit(4).service(service), "default")
    }

    #[tokio::test(start_paused = true)]
    async fn gangs_bound_together_wait_for_a_permit_not_against_their_deadline() {
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // A deadline of 300 ms, and 40 pods answered in 100 ms each, four at a time: sent
        // all at once they would wait their turn inside the client against the deadline and
        // time out; waiting for a permit first, each has its 100 ms.
        let binder =
            Arc::new(Binder::new(slow_server(held, most.clone()), None, Duration::from_millis(300)).with_in_flight(4));
        let gang = |g: usize| GangBinding {
            gang: GangKey { kind: GangKind::Muster, namespace: "ml".into(), name: format!("g{g}") },
            queue: "default".into(),
            needed: 8,
            min_member: 8,
            created: 0,
            pods: (0..8).map(|i| (PodKey { namespace: "ml".into(), name: format!("g{g}-{i}") }, "n1".into())).collect(),
            uids: Default::default(),
            claims: Vec::new(),
            volumes: Vec::new(),
            opportunistic: None,
        };
        let outcomes = futures::future::join_all((0..5).map(|g| binder.clone().bind(gang(g)))).await;
        for outcome in outcomes {
            let BindOutcome::Bound { bound, failed } = outcome else { panic!("rolled back: {outcome:?}") };
            assert_eq!((bound.len(), failed.len()), (8, 0));
        }
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 4, "at most four requests at once");
    }
}
