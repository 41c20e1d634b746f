//! The kubelet side of driver mode: registers the agent with the kubelet as the DRA plugin
//! of its driver, and prepares allocated claims by writing CDI specs, so pods whose claims
//! name this node's GPUs really start.
//!
//! ```text
//!  kubelet ──GetInfo──────────────► registry_dir/<driver>-reg.sock   (registration)
//!     │        "DRAPlugin", <driver>, plugin_dir/dra.sock, ["v1.DRAPlugin"]
//!     └──NodePrepareResources─────► plugin_dir/dra.sock               (dra)
//!             │ ResourceClaim (API server) + GPUs (inventory) ──cdi::prepare──► Spec
//!             │                          (shares of a GPU on an MPS node: mps::client_edits)
//!             └──────────────────────────────────────────────► cdi_dir/<driver>-<uid>.json
//! ```

pub mod cdi;
pub mod dra;
pub mod mps;
pub mod proto;
pub mod registration;
pub mod spec_file;

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use futures::FutureExt;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::agent::gpu::Gpu;
use proto::dra::dra_plugin_server::DraPluginServer;
use proto::registration::registration_server::RegistrationServer;

/// The file name of the DRA socket in the plugin folder.
pub const DRA_SOCKET: &str = "dra.sock";

/// Where the plugin lives on the node.
#[derive(Clone, Debug)]
pub struct PluginConfig {
    /// The DRA driver name of the published ResourceSlices (`gpu.muster.dev`).
    pub driver_name: String,
    /// This node: the pool of the published devices.
    pub node_name: String,
    /// The folder of the DRA socket (`/var/lib/kubelet/plugins/gpu.muster.dev`). The
    /// kubelet dials the socket at this very path, so the agent must see the host's folder
    /// at the same path.
    pub plugin_dir: PathBuf,
    /// The kubelet's plugin registration folder (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: PathBuf,
    /// The folder container runtimes read CDI specs from (`/var/run/cdi`).
    pub cdi_dir: PathBuf,
    /// The pipe directory of the node's CUDA MPS control daemon, when the node runs MPS:
    /// containers given a share of a GPU become MPS clients capped at their share.
    pub mps_pipe_directory: Option<PathBuf>,
}

impl PluginConfig {
    /// The plugin as the agent's options place it on `node_name`.
    pub fn new(options: &crate::agent::options::AgentOptions, node_name: &str) -> PluginConfig {
        PluginConfig {
            driver_name: options.driver_name.clone(),
            node_name: node_name.to_string(),
            plugin_dir: options.plugin_dir.clone(),
            registry_dir: options.registry_dir.clone(),
            cdi_dir: options.cdi_dir.clone(),
            mps_pipe_directory: options.mps.then(|| options.mps_pipe_directory.clone()),
        }
    }

    /// The socket of the DRA plugin API.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir.join(DRA_SOCKET)
    }

    /// The socket the kubelet's plugin watcher finds in the registry folder.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join(format!("{}-reg.sock", self.driver_name))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "driver name {0:?} cannot name CDI devices: it must start with a letter and hold only letters, digits, '-', '_' and '.'"
    )]
    InvalidDriverName(String),
    #[error("failed to create folder {path}: {source}")]
    CreateFolder { path: PathBuf, source: io::Error },
    #[error("failed to remove the stale socket {path}: {source}")]
    RemoveStaleSocket { path: PathBuf, source: io::Error },
    #[error("{path} exists and is not a socket; not removing it")]
    NotASocket { path: PathBuf },
    #[error("failed to listen on {path}: {source}")]
    Listen { path: PathBuf, source: io::Error },
    #[error("the {service} gRPC server failed: {source}")]
    Serve { service: &'static str, source: tonic::transport::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Serves the DRA plugin API and the registration service until `shutdown` completes, then
/// removes both sockets (the kubelet takes the registration socket's removal as the
/// plugin's departure).
///
/// The DRA socket is listening before the registration socket appears, so the kubelet
/// never learns of an endpoint that does not answer. Claims are prepared from `gpus` as
/// it is at the time of each call.
pub async fn serve(
    config: PluginConfig,
    client: kube::Client,
    gpus: watch::Receiver<Vec<Gpu>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    if !cdi::is_valid_vendor(&config.driver_name) {
        return Err(Error::InvalidDriverName(config.driver_name));
    }
    for dir in [&config.plugin_dir, &config.registry_dir, &config.cdi_dir] {
        tokio::fs::create_dir_all(dir).await.map_err(|source| Error::CreateFolder { path: dir.clone(), source })?;
    }
    let dra_socket = config.dra_socket();
    let registration_socket = config.registration_socket();
    let dra_listener = listen(&dra_socket).await?;
    let registration_listener = listen(&registration_socket).await?;

    let info = registration::plugin_info(&config.driver_name, &dra_socket.to_string_lossy());
    let dra_service = dra::DraService::new(&config, client, gpus);
    let shutdown = shutdown.shared();
    let dra_server = Server::builder()
        .add_service(DraPluginServer::new(dra_service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(dra_listener), shutdown.clone())
        .map(|r| r.map_err(|source| Error::Serve { service: "DRA plugin", source }));
    let registration_server = Server::builder()
        .add_service(RegistrationServer::new(registration::RegistrationService::new(info)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(registration_listener), shutdown)
        .map(|r| r.map_err(|source| Error::Serve { service: "plugin registration", source }));
    tracing::info!(
        driver = %config.driver_name,
        dra_socket = %dra_socket.display(),
        registration_socket = %registration_socket.display(),
        cdi_dir = %config.cdi_dir.display(),
        "serving the kubelet plugin"
    );
    let served = tokio::try_join!(dra_server, registration_server).map(|_| ());

    // The registration socket goes first, so the kubelet stops using the plugin before its
    // endpoint disappears.
    for socket in [&registration_socket, &dra_socket] {
        if let Err(error) = remove_socket(socket).await {
            tracing::warn!(%error, "failed to remove a socket on shutdown");
        }
    }
    served
}

/// Listens on `path`, replacing a socket left by an earlier run. Anything else at that path
/// is left alone: it is not ours to remove.
async fn listen(path: &Path) -> Result<UnixListener> {
    remove_socket(path).await?;
    UnixListener::bind(path).map_err(|source| Error::Listen { path: path.into(), source })
}

async fn remove_socket(path: &Path) -> Result<()> {
    match tokio::fs::symlink_metadata(path).await {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::RemoveStaleSocket { path: path.into(), source }),
        Ok(metadata) if !metadata.file_type().is_socket() => Err(Error::NotASocket { path: path.into() }),
        Ok(_) => match tokio::fs::remove_file(path).await {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                Err(Error::RemoveStaleSocket { path: path.into(), source: error })
            }
            _ => Ok(()),
        },
    }
}
