//! The agent's writes: ResourceSlices (driver mode), DeviceTaintRules (companion mode) and
//! Node labels, each computed by a pure function first and written only when it changed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceTaintRule, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use thiserror::Error;

use super::companion::{self, RulePlan};
use super::gpu::Gpu;
use super::labels;
use super::slices::{self, NODE_LABEL, Publication, SlicePlan};

#[derive(Debug, Error)]
pub enum Error {
    #[error("failed to list {what}: {source}")]
    List { what: String, source: kube::Error },
    #[error("failed to write {kind} {name}: {source}")]
    Write { kind: &'static str, name: String, source: kube::Error },
    #[error("failed to label node {node}: {source}")]
    Label { node: String, source: kube::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every slice of `driver` for `node`.
pub async fn node_slices(client: &kube::Client, driver: &str, node: &str) -> Result<Vec<ResourceSlice>> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.driver={driver},spec.nodeName={node}"));
    let list = api
        .list(&params)
        .await
        .map_err(|source| Error::List { what: format!("ResourceSlices of {driver} on node {node}"), source })?;
    Ok(list.items)
}

/// Publishes the GPUs as the node's pool; returns whether anything was written.
pub async fn publish_slices(client: &kube::Client, publication: &Publication, gpus: &[Gpu]) -> Result<bool> {
    let published = node_slices(client, &publication.driver_name, &publication.node_name).await?;
    let plan = slices::plan(&published, slices::devices(gpus, publication), publication);
    if plan.is_empty() {
        return Ok(false);
    }
    write_slices(client, plan).await?;
    Ok(true)
}

async fn write_slices(client: &kube::Client, plan: SlicePlan) -> Result<()> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let pp = PostParams::default();
    // Replace before create: a pool shrinking from two slices to one keeps a complete
    // generation visible at every step the scheduler may read.
    for slice in plan.replace {
        let name = slice.metadata.name.clone().unwrap_or_default();
        api.replace(&name, &pp, &slice).await.map_err(|source| Error::Write { kind: "ResourceSlice", name, source })?;
    }
    for slice in plan.create {
        let name = slice.metadata.name.clone().unwrap_or_default();
        api.create(&pp, &slice).await.map_err(|source| Error::Write { kind: "ResourceSlice", name, source })?;
    }
    delete_all(&api, "ResourceSlice", plan.delete).await
}

/// Deletes the named objects; one already gone is no error.
async fn delete_all<K>(api: &Api<K>, kind: &'static str, names: Vec<String>) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for name in names {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Write { kind, name, source }),
        }
    }
    Ok(())
}

/// Removes the node's pool (the agent is being uninstalled or stopped).
pub async fn remove_slices(client: &kube::Client, publication: &Publication) -> Result<()> {
    let published = node_slices(client, &publication.driver_name, &publication.node_name).await?;
    let delete = published.into_iter().filter_map(|s| s.metadata.name).collect();
    write_slices(client, SlicePlan { delete, ..Default::default() }).await
}

/// Brings the node's DeviceTaintRules to what its GPUs' health calls for; returns whether
/// anything was written.
pub async fn apply_rules(client: &kube::Client, node: &str, wanted: Vec<DeviceTaintRule>) -> Result<bool> {
    let api: Api<DeviceTaintRule> = Api::all(client.clone());
    let params = ListParams::default().labels(&format!("{NODE_LABEL}={node}"));
    let published = api
        .list(&params)
        .await
        .map_err(|source| Error::List { what: format!("DeviceTaintRules of node {node}"), source })?
        .items;
    let RulePlan { create, replace, delete } = companion::plan(&published, wanted);
    let changed = !(create.is_empty() && replace.is_empty() && delete.is_empty());
    let pp = PostParams::default();
    for rule in create {
        let name = rule.metadata.name.clone().unwrap_or_default();
        api.create(&pp, &rule).await.map_err(|source| Error::Write { kind: "DeviceTaintRule", name, source })?;
    }
    for rule in replace {
        let name = rule.metadata.name.clone().unwrap_or_default();
        api.replace(&name, &pp, &rule).await.map_err(|source| Error::Write {
            kind: "DeviceTaintRule",
            name,
            source,
        })?;
    }
    delete_all(&api, "DeviceTaintRule", delete).await?;
    Ok(changed)
}

/// Sets the GPU feature discovery labels on the node when they differ from what it has.
pub async fn label_node(client: &kube::Client, node: &Node, gpus: &[Gpu]) -> Result<bool> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let current = node.metadata.labels.clone().unwrap_or_default();
    // Where GPU feature discovery runs (the GPU Operator), it owns these labels.
    if current.contains_key(labels::GFD_MARKER) {
        return Ok(false);
    }
    let wanted = labels::node_labels(gpus);
    let changes: BTreeMap<&String, &Option<String>> =
        wanted.iter().filter(|(k, v)| current.get(*k) != v.as_ref()).collect();
    if changes.is_empty() {
        return Ok(false);
    }
    let api: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({"metadata": {"labels": changes}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Label { node: name.clone(), source })?;
    Ok(true)
}
