//! Pods taken off their nodes: evicted through the Eviction API (which asks the pods'
//! PodDisruptionBudgets), or deleted as the last resort for an eviction refused too often.
//! Both only touch the pod they were decided for (its UID as a precondition).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams};

use crate::engine::model::PodKey;
use crate::k8s::client::request::{self, Operation, RequestError, Retry};

/// Evicts one pod through the Eviction API, only if it still has `uid` (when known); a pod
/// already gone, or replaced by another of the same name, is no error. Retried under the
/// deadline: with the UID precondition, a repeated eviction does no harm.
pub async fn evict(client: &kube::Client, retry: Retry, pod: &PodKey, uid: Option<&str>) -> Result<(), RequestError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let preconditions = kube::api::Preconditions { uid: uid.map(str::to_string), resource_version: None };
    let params = EvictParams {
        delete_options: Some(kube::api::DeleteParams { preconditions: Some(preconditions), ..Default::default() }),
        ..Default::default()
    };
    match request::retry(retry, Operation::Idempotent, || pods.evict(&pod.name, &params)).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes one pod, only if it still has `uid` (when known), as [`evict`] does but without
/// asking any PodDisruptionBudget: the last resort for an eviction refused too often.
pub async fn delete(client: &kube::Client, retry: Retry, pod: &PodKey, uid: Option<&str>) -> Result<(), RequestError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let preconditions = kube::api::Preconditions { uid: uid.map(str::to_string), resource_version: None };
    let params = kube::api::DeleteParams { preconditions: Some(preconditions), ..Default::default() };
    match request::retry(retry, Operation::Idempotent, || pods.delete(&pod.name, &params)).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(e) => Err(e),
    }
}
