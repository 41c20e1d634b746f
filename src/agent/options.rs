//! The node agent's command-line options (`muster agent --help`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// How the agent serves the node's GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Companion when NVIDIA's DRA driver publishes this node's GPUs, driver otherwise.
    Auto,
    /// Publish the GPUs as ResourceSlices under `--driver-name` and serve the kubelet plugin.
    Driver,
    /// NVIDIA's DRA driver publishes the GPUs; only take failing ones out of service.
    Companion,
}

#[derive(Clone, Debug, Args)]
pub struct AgentOptions {
    /// auto, driver or companion.
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: Mode,
    /// The node this agent runs on (the DaemonSet sets it from spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Driver name of the ResourceSlices published in driver mode. Never set it to
    /// gpu.nvidia.com on a cluster that runs NVIDIA's DRA driver.
    #[arg(long, default_value = "gpu.muster.dev")]
    pub driver_name: String,
    /// Driver name of NVIDIA's DRA driver, whose devices companion mode taints.
    #[arg(long, default_value = "gpu.nvidia.com")]
    pub nvidia_driver_name: String,
    /// Read the GPUs from this YAML file instead of NVML (re-read every poll interval, so
    /// editing a GPU's health in it marks the GPU unhealthy).
    #[arg(long, value_name = "FILE", conflicts_with = "fake_gpus")]
    pub inventory: Option<PathBuf>,
    /// Invent this many GPUs instead of reading NVML.
    #[arg(long, value_name = "N")]
    pub fake_gpus: Option<u32>,
    /// Product name of the invented GPUs.
    #[arg(long, default_value = "NVIDIA H100 80GB HBM3", requires = "fake_gpus")]
    pub fake_product: String,
    /// The NVML library to load (default: libnvidia-ml.so.1 from the library path).
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// Print, as YAML, the ResourceSlices driver mode would publish, and exit without
    /// contacting a cluster. Needs --node-name.
    #[arg(long)]
    pub dry_run: bool,
    /// Publish every GPU as shareable: several claims may each take part of its memory.
    #[arg(long)]
    pub sharing: bool,
    /// How often GPUs are re-read and health is checked, in seconds.
    #[arg(long, default_value_t = 10)]
    pub poll_interval_seconds: u64,
    /// Where /metrics (dcgm-exporter's metric names), /healthz and /readyz are served;
    /// empty to serve nothing.
    #[arg(long, default_value = "0.0.0.0:9400")]
    pub metrics_address: String,
    /// Serve the kubelet's DRA plugin API (driver mode only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub kubelet_plugin: bool,
    /// The kubelet's plugin folder for this driver's socket.
    #[arg(long, default_value = "/var/lib/kubelet/plugins/gpu.muster.dev")]
    pub plugin_dir: PathBuf,
    /// The kubelet's plugin registration folder.
    #[arg(long, default_value = "/var/lib/kubelet/plugins_registry")]
    pub registry_dir: PathBuf,
    /// Where CDI specs for prepared claims are written.
    #[arg(long, default_value = "/var/run/cdi")]
    pub cdi_dir: PathBuf,
    /// The node runs CUDA MPS (its control daemon's pipes in --mps-pipe-directory): a
    /// container given a share of a GPU (--sharing) is made an MPS client whose device
    /// memory is capped at its share (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
    #[arg(long)]
    pub mps: bool,
    /// The pipe directory of the node's MPS control daemon (its CUDA_MPS_PIPE_DIRECTORY),
    /// mounted into the containers of shared GPUs with --mps.
    #[arg(long, default_value = "/tmp/nvidia-mps")]
    pub mps_pipe_directory: PathBuf,
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    pub log_json: bool,
}
