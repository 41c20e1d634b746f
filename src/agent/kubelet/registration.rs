//! Plugin registration: what the agent tells the kubelet's plugin watcher when it finds the
//! registration socket (a DRA plugin, its driver name, where the DRA API is served, and
//! which version of it).

use tonic::{Request, Response, Status};

use super::proto::registration::registration_server::Registration;
use super::proto::registration::{InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse};

/// The plugin type the kubelet hands to its DRA plugin manager.
pub const PLUGIN_TYPE: &str = "DRAPlugin";

/// The gRPC services served on the DRA socket, as `<version>.<service>`: the kubelet picks
/// the first it knows. Kubernetes 1.34 and later know `v1.DRAPlugin` (and still
/// `v1beta1.DRAPlugin`); only v1 is served here.
pub const SUPPORTED_SERVICES: [&str; 1] = ["v1.DRAPlugin"];

/// What `GetInfo` answers for `driver` with its DRA socket at `endpoint`.
pub fn plugin_info(driver: &str, endpoint: &str) -> PluginInfo {
    PluginInfo {
        r#type: PLUGIN_TYPE.into(),
        name: driver.into(),
        endpoint: endpoint.into(),
        supported_versions: SUPPORTED_SERVICES.iter().map(|s| s.to_string()).collect(),
    }
}

/// The registration service on the registration socket.
pub struct RegistrationService {
    info: PluginInfo,
}

impl RegistrationService {
    pub fn new(info: PluginInfo) -> RegistrationService {
        RegistrationService { info }
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(&self, _request: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        tracing::debug!(driver = %self.info.name, "the kubelet asked for the plugin's registration info");
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            tracing::info!(driver = %self.info.name, endpoint = %self.info.endpoint, "registered with the kubelet");
        } else {
            // The kubelet stops here; it retries when the registration socket reappears.
            tracing::error!(driver = %self.info.name, error = %status.error, "the kubelet refused the registration");
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
