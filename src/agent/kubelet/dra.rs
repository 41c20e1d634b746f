//! The DRA plugin API on the DRA socket: the kubelet asks the agent to prepare the devices
//! of allocated claims before a pod's containers start (write their CDI specs) and to
//! unprepare them once the pod is gone (remove the specs).
//!
//! Failures are per claim: each answer's `error` names the claim and what is wrong, so one
//! bad claim never fails the others of the same call, and the gRPC call itself succeeds.

use std::collections::HashMap;
use std::path::PathBuf;

use futures::future::join_all;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::Api;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::proto::dra::dra_plugin_server::DraPlugin;
use super::proto::dra::{
    Claim, Device, NodePrepareResourceResponse, NodePrepareResourcesRequest, NodePrepareResourcesResponse,
    NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse,
};
use super::spec_file;
use super::{cdi, mps};
use crate::agent::gpu::Gpu;

/// Why one claim could not be prepared or unprepared.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("not found")]
    NotFound,
    #[error("failed to read it: {0}")]
    Read(#[source] kube::Error),
    #[error("its UID is {actual}, not {requested}: the claim was deleted and created again")]
    UidMismatch { requested: String, actual: String },
    #[error("it is not allocated")]
    NotAllocated,
    #[error("{0:?} is not a claim UID")]
    InvalidUid(String),
    #[error(transparent)]
    Device(#[from] cdi::Error),
    #[error("failed to write its CDI spec {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("failed to remove its CDI spec {path}: {source}")]
    Remove { path: PathBuf, source: std::io::Error },
}

/// The DRA plugin service: reads claims from the API server and GPUs from the agent's
/// inventory, writes CDI specs into `cdi_dir`.
pub struct DraService {
    driver: String,
    node: String,
    cdi_dir: PathBuf,
    mps_pipe_directory: Option<PathBuf>,
    client: kube::Client,
    gpus: watch::Receiver<Vec<Gpu>>,
}

impl DraService {
    pub fn new(config: &super::PluginConfig, client: kube::Client, gpus: watch::Receiver<Vec<Gpu>>) -> DraService {
        DraService {
            driver: config.driver_name.clone(),
            node: config.node_name.clone(),
            cdi_dir: config.cdi_dir.clone(),
            mps_pipe_directory: config.mps_pipe_directory.clone(),
            client,
            gpus,
        }
    }

    /// Prepares one claim. Preparing it again gives the same answer and rewrites the same
    /// spec, which is what the kubelet relies on when it retries after a restart.
    async fn prepare(&self, claim: &Claim) -> Result<Vec<Device>, ClaimError> {
        let file =
            cdi::spec_file_name(&self.driver, &claim.uid).ok_or_else(|| ClaimError::InvalidUid(claim.uid.clone()))?;
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
        let object = api.get_opt(&claim.name).await.map_err(ClaimError::Read)?.ok_or(ClaimError::NotFound)?;
        let actual = object.metadata.uid.clone().unwrap_or_default();
        if actual != claim.uid {
            return Err(ClaimError::UidMismatch { requested: claim.uid.clone(), actual });
        }
        let results = object
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .ok_or(ClaimError::NotAllocated)?
            .devices
            .as_ref()
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default();
        let prepared = {
            let gpus = self.gpus.borrow();
            let mut prepared = cdi::prepare(&self.driver, &self.node, &claim.uid, results, &gpus)?;
            if let Some(pipe_directory) = &self.mps_pipe_directory {
                mps::add_client_edits(&mut prepared, &self.driver, results, &gpus, pipe_directory)?;
            }
            prepared
        };
        if let Some(spec) = &prepared.spec {
            spec_file::write(&self.cdi_dir, &file, spec)
                .await
                .map_err(|source| ClaimError::Write { path: self.cdi_dir.join(&file), source })?;
        }
        Ok(prepared
            .devices
            .into_iter()
            .map(|d| Device {
                request_names: d.request_names,
                pool_name: d.pool,
                device_name: d.device,
                cdi_device_ids: d.cdi_device_ids,
            })
            .collect())
    }

    /// Unprepares one claim: its spec goes, whether or not it was there. The API server is
    /// not asked: the claim may be deleted already.
    async fn unprepare(&self, claim: &Claim) -> Result<(), ClaimError> {
        let file =
            cdi::spec_file_name(&self.driver, &claim.uid).ok_or_else(|| ClaimError::InvalidUid(claim.uid.clone()))?;
        spec_file::remove(&self.cdi_dir, &file)
            .await
            .map_err(|source| ClaimError::Remove { path: self.cdi_dir.join(&file), source })
    }
}

/// How a claim is named in errors the kubelet shows in the pod's events.
fn describe(claim: &Claim, error: &ClaimError) -> String {
    format!("resource claim {}/{} (UID {}): {error}", claim.namespace, claim.name, claim.uid)
}

#[tonic::async_trait]
impl DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        request: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let claims = request.into_inner().claims;
        let outcomes = join_all(claims.iter().map(|claim| self.prepare(claim))).await;
        let mut answers = HashMap::with_capacity(claims.len());
        for (claim, outcome) in claims.iter().zip(outcomes) {
            let answer = match outcome {
                Ok(devices) => {
                    tracing::info!(namespace = %claim.namespace, claim = %claim.name, uid = %claim.uid,
                        devices = devices.len(), "prepared claim");
                    NodePrepareResourceResponse { devices, error: String::new() }
                }
                Err(error) => {
                    let error = describe(claim, &error);
                    tracing::warn!(%error, "failed to prepare claim");
                    NodePrepareResourceResponse { devices: Vec::new(), error }
                }
            };
            answers.insert(claim.uid.clone(), answer);
        }
        Ok(Response::new(NodePrepareResourcesResponse { claims: answers }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let claims = request.into_inner().claims;
        let outcomes = join_all(claims.iter().map(|claim| self.unprepare(claim))).await;
        let mut answers = HashMap::with_capacity(claims.len());
        for (claim, outcome) in claims.iter().zip(outcomes) {
            let error = match outcome {
                Ok(()) => {
                    tracing::info!(namespace = %claim.namespace, claim = %claim.name, uid = %claim.uid, "unprepared claim");
                    String::new()
                }
                Err(error) => {
                    let error = describe(claim, &error);
                    tracing::warn!(%error, "failed to unprepare claim");
                    error
                }
            };
            answers.insert(claim.uid.clone(), NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(NodeUnprepareResourcesResponse { claims: answers }))
    }
}
