//! Devices with binding conditions (KEP-5007), waited for inside the gang's transaction as
//! kube-scheduler's DynamicResources plugin waits in PreBind: once the claims are written,
//! no pod of the gang is bound until every allocated device that lists `bindingConditions`
//! has them all True in its claim's `status.devices`, as its driver reports them (a device
//! attached over a fabric, say). A device whose driver sets one of its
//! `bindingFailureConditions` True, a claim that loses its allocation, or conditions not met
//! within the timeout (counted from the allocation's `allocationTimestamp`) fail the gang's
//! binding: it is rolled back whole, and the claims waited on are deallocated, so that the
//! next cycle allocates afresh rather than wait on the same device again.

use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use kube::api::Api;

use super::claims::{ClaimDone, ClaimWrite};
use crate::k8s::client::request::{self, Operation, RequestError, Retry};

/// How often the claims are read while the binder waits for their devices.
const POLL: Duration = Duration::from_secs(1);

/// Whether any device of the allocation has binding conditions.
fn has_conditions(allocation: &AllocationResult) -> bool {
    allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .is_some_and(|results| results.iter().any(|r| r.binding_conditions.as_ref().is_some_and(|c| !c.is_empty())))
}

/// Whether a claim write leaves devices to wait for: the allocation it writes has binding
/// conditions, or, reserving a claim allocated before, the claim's allocation has.
pub fn waits(write: &ClaimWrite) -> bool {
    let before = || write.cached.as_ref()?.status.as_ref()?.allocation.as_ref();
    write.allocation.as_ref().or_else(before).is_some_and(has_conditions)
}

/// Where a claim's devices stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Some device's conditions are not all True yet: the first such device.
    Pending(String),
    /// It will never be ready: why.
    Failed(String),
}

/// Where the devices of `claim` (named `name` in the messages) stand: every allocated device
/// with binding conditions must have an entry in `status.devices` with all of them True and
/// none of its failure conditions True.
pub fn readiness(name: &str, claim: &ResourceClaim) -> Readiness {
    let status = claim.status.as_ref();
    let Some(allocation) = status.and_then(|s| s.allocation.as_ref()) else {
        return Readiness::Failed(format!("claim {name} lost its allocation while its devices were being bound"));
    };
    let reported = status.and_then(|s| s.devices.as_deref()).unwrap_or_default();
    let results = allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default();
    for result in results {
        let Some(wanted) = result.binding_conditions.as_ref().filter(|c| !c.is_empty()) else { continue };
        let device = format!("{}/{}/{}", result.driver, result.pool, result.device);
        let entry =
            reported.iter().find(|d| d.driver == result.driver && d.pool == result.pool && d.device == result.device);
        let Some(entry) = entry else { return Readiness::Pending(device) };
        let conditions = entry.conditions.as_deref().unwrap_or_default();
        let failures = result.binding_failure_conditions.as_deref().unwrap_or_default();
        if let Some(failed) = conditions.iter().find(|c| c.status == "True" && failures.contains(&c.type_)) {
            return Readiness::Failed(format!(
                "device binding failed: device {device} of claim {name}: {} is True ({}: {})",
                failed.type_, failed.reason, failed.message
            ));
        }
        let met = |t: &String| conditions.iter().any(|c| &c.type_ == t && c.status == "True");
        if !wanted.iter().all(met) {
            return Readiness::Pending(device);
        }
    }
    Readiness::Ready
}

/// Whether the allocation was made more than `timeout` before `now`, by its
/// `allocationTimestamp`; an allocation without one counts from `since`.
fn timed_out(claim: &ResourceClaim, timeout: Duration, since: Instant) -> bool {
    let stamp = claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.allocation_timestamp.as_ref());
    match stamp {
        Some(stamp) => {
            let age = jiff::Timestamp::now().duration_since(stamp.0);
            age.as_secs() >= 0 && age.unsigned_abs() >= timeout
        }
        None => since.elapsed() >= timeout,
    }
}

/// Waits, reading the claims every second, until the devices of every claim in `claims` are
/// ready; the first failure, or the first claim still not ready `timeout` after its
/// allocation, is the error. `fenced` is asked before each read.
pub async fn wait(
    client: &kube::Client,
    retry: Retry,
    fenced: &(dyn Fn() -> Result<(), RequestError> + Sync),
    claims: &[&ClaimDone],
    timeout: Duration,
) -> Result<(), String> {
    let since = Instant::now();
    let mut waiting: Vec<&ClaimDone> = claims.to_vec();
    let mut announced = false;
    loop {
        let mut still = Vec::with_capacity(waiting.len());
        for done in waiting {
            fenced().map_err(|e| e.to_string())?;
            let name = format!("{}/{}", done.namespace, done.name);
            let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &done.namespace);
            let claim = match request::retry(retry, Operation::Idempotent, || api.get(&done.name)).await {
                Ok(claim) => claim,
                Err(e) if e.is_not_found() => {
                    return Err(format!("claim {name} was deleted while its devices were being bound"));
                }
                Err(e) => return Err(format!("reading claim {name} while its devices were being bound: {e}")),
            };
            match readiness(&name, &claim) {
                Readiness::Ready => {}
                Readiness::Failed(why) => return Err(why),
                Readiness::Pending(device) if timed_out(&claim, timeout, since) => {
                    return Err(format!(
                        "device binding timeout: device {device} of claim {name} did not meet its binding conditions within {}s of its allocation (deviceBindTimeoutSeconds)",
                        timeout.as_secs()
                    ));
                }
                Readiness::Pending(device) => {
                    if !announced {
                        tracing::info!(claim = %name, device, "waiting for the device's binding conditions before binding the gang");
                        announced = true;
                    }
                    still.push(done);
                }
            }
        }
        waiting = still;
        if waiting.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(devices: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ml"},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "d", "pool": "p", "device": "plain"},
                    {"request": "gpu", "driver": "d", "pool": "p", "device": "fabric",
                     "bindingConditions": ["Attached", "Healthy"], "bindingFailureConditions": ["AttachFailed"]},
                ]}},
                "devices": devices,
            },
        }))
        .expect("claim")
    }

    fn reported(conditions: &[(&str, &str)]) -> serde_json::Value {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, s)| {
                json!({"type": t, "status": s, "reason": "Driver", "message": "said so",
                                 "lastTransitionTime": "2026-12-07T00:00:00Z"})
            })
            .collect();
        json!([{"driver": "d", "pool": "p", "device": "fabric", "conditions": conditions}])
    }

    #[test]
    fn a_device_is_ready_only_once_every_binding_condition_is_true_and_fails_on_a_failure_condition() {
        let pending = |v: serde_json::Value| readiness("ml/c", &claim(v));
        assert_eq!(pending(json!(null)), Readiness::Pending("d/p/fabric".into()), "not reported yet");
        assert_eq!(pending(reported(&[("Attached", "True")])), Readiness::Pending("d/p/fabric".into()));
        assert_eq!(
            pending(reported(&[("Attached", "True"), ("Healthy", "False")])),
            Readiness::Pending("d/p/fabric".into())
        );
        assert_eq!(pending(reported(&[("Attached", "True"), ("Healthy", "True")])), Readiness::Ready);
        let Readiness::Failed(why) =
            pending(reported(&[("Attached", "True"), ("Healthy", "True"), ("AttachFailed", "True")]))
        else {
            panic!("a True failure condition fails the device even with its conditions met")
        };
        assert!(
            why.contains("device binding failed")
                && why.contains("d/p/fabric")
                && why.contains("ml/c")
                && why.contains("said so"),
            "{why}"
        );
        assert_eq!(
            pending(reported(&[("Attached", "True"), ("Healthy", "True"), ("AttachFailed", "False")])),
            Readiness::Ready
        );
        let mut gone = claim(json!(null));
        gone.status.as_mut().expect("status").allocation = None;
        assert!(matches!(readiness("ml/c", &gone), Readiness::Failed(why) if why.contains("lost its allocation")));
    }

    #[test]
    fn only_allocations_with_binding_conditions_are_waited_for_and_the_timeout_counts_from_the_allocation() {
        let with = claim(json!(null));
        let allocation = with.status.as_ref().and_then(|s| s.allocation.clone());
        let mut write = ClaimWrite {
            claim: crate::engine::dra::model::ClaimKey { namespace: "ml".into(), name: "c".into() },
            pod: crate::engine::model::PodKey { namespace: "ml".into(), name: "p".into() },
            allocation: allocation.clone(),
            consumers: Vec::new(),
            create: None,
            cached: None,
        };
        assert!(waits(&write));
        write.allocation = None;
        assert!(!waits(&write), "nothing allocated, nothing cached");
        write.cached = Some(with.clone());
        assert!(waits(&write), "reserving a claim allocated before with binding conditions");
        let mut plain = allocation.expect("allocation");
        plain.devices.as_mut().and_then(|d| d.results.as_mut()).expect("results").truncate(1);
        write.allocation = Some(plain);
        assert!(!waits(&write));

        let mut old = with;
        let stamp = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(700);
        old.status.as_mut().and_then(|s| s.allocation.as_mut()).expect("allocation").allocation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(stamp));
        assert!(timed_out(&old, Duration::from_secs(600), Instant::now()), "allocated 700 s ago");
        assert!(!timed_out(&old, Duration::from_secs(800), Instant::now()));
        old.status.as_mut().and_then(|s| s.allocation.as_mut()).expect("allocation").allocation_timestamp = None;
        assert!(!timed_out(&old, Duration::from_secs(600), Instant::now()), "no stamp: counted from now");
    }
}
