//! A real Kubernetes control plane on loopback: etcd, kube-apiserver and, when a test asks
//! for it, kube-controller-manager, built at the pinned versions by `hack/build-kube.sh`.
//!
//! One control plane is started per run of the e2e test binary, on first use, and shared by
//! all its tests, which run at the same time and keep apart through their own namespace,
//! scheduler name, node names and labels (see `cluster`).
//! There is no fallback: when the binaries cannot be built or a process does not come up,
//! the test panics with the process's log, so nothing ever passes without a real server.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{pki, process};

/// Feature gates the later work needs that are not on by default in v1.37 (or that are beta
/// and on, and must stay on): partitionable devices, consumable capacity and workload claims
/// for DRA; the Workload API, which also carries kube-scheduler's own gang scheduling (so it
/// can run beside Muster), and topology-aware workload scheduling. DRADeviceTaints,
/// DRADeviceTaintRules and DRAExtendedResource are GA in v1.37, always on, and may not be set
/// without a warning; v1.37 has no separate GangScheduling gate any more.
pub const FEATURE_GATES: &[&str] = &[
    "DRAPartitionableDevices",
    "DRAConsumableCapacity",
    "DRAWorkloadResourceClaims",
    "GenericWorkload",
    "TopologyAwareWorkloadScheduling",
];

/// API versions beyond the default ones: the scheduling PodGroup.
pub const RUNTIME_CONFIG: &[&str] = &["scheduling.k8s.io/v1beta1=true"];

/// Controllers kube-controller-manager runs for tests: claims from templates, Jobs,
/// StatefulSets, volume claims from pods' ephemeral volumes, the binding of volumes to
/// claims, and the garbage collector. Node lifecycle is left out on purpose: it would taint
/// the fake nodes, which have no kubelet sending heartbeats.
pub const CONTROLLERS: &[&str] = &[
    "resourceclaim-controller",
    "job-controller",
    "statefulset-controller",
    "ephemeral-volume-controller",
    "persistentvolume-binder-controller",
    "garbage-collector-controller",
];

pub struct ControlPlane {
    pub dir: PathBuf,
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
    pub kubernetes_version: String,
    controller_manager: OnceLock<u32>,
}

static CONTROL_PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The control plane of this test binary, started on first use. When it cannot start, the
/// first test says why and every later test fails at once with the same words.
pub fn control_plane() -> &'static ControlPlane {
    let started = CONTROL_PLANE.get_or_init(|| {
        std::panic::catch_unwind(ControlPlane::start).map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown failure".into())
        })
    });
    match started {
        Ok(control_plane) => control_plane,
        Err(why) => panic!("the test control plane did not start: {why}"),
    }
}

/// The Kubernetes version pinned in `hack/kube/go.mod`.
pub fn pinned_kubernetes_version() -> String {
    let go_mod = repo_root().join("hack/kube/go.mod");
    let text = std::fs::read_to_string(&go_mod).unwrap_or_else(|e| panic!("failed to read {}: {e}", go_mod.display()));
    text.lines()
        .map(|l| l.trim().trim_start_matches("require").trim())
        .find_map(|l| l.strip_prefix("k8s.io/kubernetes "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{} pins no k8s.io/kubernetes version", go_mod.display()))
        .to_string()
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding the built binaries: `$MUSTER_KUBE_BIN` when the test command set it,
/// otherwise whatever `hack/build-kube.sh` builds or finds in its cache.
fn binaries() -> PathBuf {
    built("MUSTER_KUBE_BIN", "build-kube.sh", "the control plane")
}

/// The folder of upstream binaries a `hack/` script builds at pinned versions: `$env` when
/// the test command set it, otherwise what the script builds or finds in its cache (the
/// last line it prints). `what` says what the tests need them for.
pub fn built(env: &str, script: &str, what: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(env) {
        return PathBuf::from(dir);
    }
    let script = repo_root().join("hack").join(script);
    let output = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("failed to run {}: {e}", script.display()));
    assert!(output.status.success(), "{} failed ({}); the e2e tests need {what}", script.display(), output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_else(|| panic!("{} printed no folder", script.display())).trim())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("no free loopback port").port()
}

/// What a failed process said: its error and fatal lines (klog's `E` and `F`), then the last
/// lines of its log.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let errors: Vec<&str> =
        lines.iter().copied().filter(|l| l.starts_with('E') || l.starts_with('F')).take(20).collect();
    let last = &lines[lines.len().saturating_sub(15)..];
    format!("{}\n...\n{}", errors.join("\n"), last.join("\n"))
}

impl ControlPlane {
    fn start() -> ControlPlane {
        let bin = binaries();
        for name in ["etcd", "kube-apiserver", "kube-controller-manager", "kubectl"] {
            assert!(bin.join(name).is_file(), "{} is missing from {}", name, bin.display());
        }
        let dir = std::env::temp_dir().join(format!("muster-e2e-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("failed to create the control plane's folder");
        process::remove_at_exit(dir.clone());
        let pki = pki::write(&dir);

        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_log = dir.join("etcd.log");
        let mut etcd = Command::new(bin.join("etcd"));
        etcd.args(["--name", "e2e", "--data-dir"])
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &etcd_url, "--advertise-client-urls", &etcd_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("e2e={peer_url}")])
            .args(["--unsafe-no-fsync", "--log-level", "warn"]);
        let etcd_pid = spawn_logged(etcd, &etcd_log);

        let port = free_port();
        let server = format!("https://127.0.0.1:{port}");
        let apiserver_log = dir.join("kube-apiserver.log");
        let mut apiserver = Command::new(bin.join("kube-apiserver"));
        apiserver
            .args(["--etcd-servers", &etcd_url, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .arg(format!("--cert-dir={}", dir.join("apiserver-certs").display()))
            .arg(format!("--tls-cert-file={}", pki.serving_cert.display()))
            .arg(format!("--tls-private-key-file={}", pki.serving_key.display()))
            .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
            .arg(format!("--service-account-key-file={}", pki.service_account_public.display()))
            .arg(format!("--service-account-signing-key-file={}", pki.service_account_private.display()))
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args(["--authorization-mode", "Node,RBAC"])
            // As on real clusters: node agents (Muster's DaemonSet) run privileged containers.
            .arg("--allow-privileged=true")
            .args(["--service-cluster-ip-range", "10.96.0.0/16"])
            // The kubernetes Service's endpoints would name a loopback address, which the
            // reconciler refuses; nothing in the tests uses that Service.
            .args(["--endpoint-reconciler-type", "none"])
            .arg(format!("--feature-gates={}", gates()))
            .arg(format!("--runtime-config={}", RUNTIME_CONFIG.join(",")))
            .args(["--v", "1"]);
        let apiserver_pid = spawn_logged(apiserver, &apiserver_log);

        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\n\
                 users:\n- name: admin\n  user:\n    client-certificate: {cert}\n    client-key: {key}\n\
                 contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: admin\ncurrent-context: e2e\n",
                ca = pki.ca_cert.display(),
                cert = pki.admin_cert.display(),
                key = pki.admin_key.display(),
            ),
        )
        .expect("failed to write the kubeconfig");

        let control_plane = ControlPlane {
            kubernetes_version: pinned_kubernetes_version(),
            dir,
            bin,
            kubeconfig,
            server,
            controller_manager: OnceLock::new(),
        };
        let started = Instant::now();
        loop {
            assert!(process::is_running(etcd_pid), "etcd exited during start-up:\n{}", log_tail(&etcd_log));
            assert!(
                process::is_running(apiserver_pid),
                "kube-apiserver exited during start-up:\n{}",
                log_tail(&apiserver_log)
            );
            if control_plane.kubectl(&["get", "--raw", "/readyz"]).is_ok_and(|out| out.trim() == "ok") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "kube-apiserver was not ready within 120s:\n{}",
                log_tail(&apiserver_log)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        eprintln!(
            "control plane: kube-apiserver {} ready at {} in {:.1?}",
            control_plane.kubernetes_version,
            control_plane.server,
            started.elapsed()
        );
        control_plane
    }

    /// Runs kubectl against this control plane; its stdout, or its stderr as the error.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(self.bin.join("kubectl"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// A kube client for this control plane, bound to the calling test's runtime.
    pub async fn client(&self) -> kube::Client {
        self.client_with(&Default::default()).await
    }

    /// The same, under the configuration's `clientConnection` limits.
    pub async fn client_with(&self, connection: &muster::config::ClientConnection) -> kube::Client {
        muster::k8s::client::request::client(self.kube_config().await, connection)
            .expect("failed to build a kube client")
    }

    async fn kube_config(&self) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("failed to read the kubeconfig");
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("failed to load the kubeconfig")
    }

    /// A client with the admin credentials that reaches the API server at `url` (a proxy in
    /// front of it, on loopback).
    pub async fn client_via(&self, url: &str) -> kube::Client {
        let mut config = self.kube_config().await;
        config.cluster_url = url.parse().expect("a URL");
        muster::k8s::client::request::client(config, &Default::default()).expect("failed to build a kube client")
    }

    /// A client that acts as `user` alone (impersonated by the admin identity), so its
    /// requests are authorized by that user's RBAC.
    pub async fn client_as(&self, user: &str) -> kube::Client {
        let mut config = self.kube_config().await;
        config.auth_info.impersonate = Some(user.into());
        config.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
        muster::k8s::client::request::client(config, &Default::default()).expect("failed to build a kube client")
    }

    /// Starts kube-controller-manager with [`CONTROLLERS`] (once per test binary).
    pub fn start_controller_manager(&self) {
        self.controller_manager.get_or_init(|| {
            let log = self.dir.join("kube-controller-manager.log");
            let mut command = Command::new(self.bin.join("kube-controller-manager"));
            command
                .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .arg(format!("--authentication-kubeconfig={}", self.kubeconfig.display()))
                .arg(format!("--authorization-kubeconfig={}", self.kubeconfig.display()))
                .arg(format!("--controllers={}", CONTROLLERS.join(",")))
                .arg(format!("--feature-gates={}", gates()))
                .args(["--leader-elect=false", "--use-service-account-credentials=false"])
                .args(["--bind-address", "127.0.0.1", "--secure-port", &free_port().to_string()])
                .arg(format!("--cert-dir={}", self.dir.join("controller-manager-certs").display()))
                .args(["--v", "1"]);
            let pid = spawn_logged(command, &log);
            std::thread::sleep(Duration::from_millis(500));
            assert!(process::is_running(pid), "kube-controller-manager exited during start-up:\n{}", log_tail(&log));
            pid
        });
    }
}

impl ControlPlane {
    /// Starts the pinned kube-scheduler with one profile named `scheduler_name`, for
    /// side-by-side runs; it stops with the test binary.
    pub fn start_kube_scheduler(&self, scheduler_name: &str) -> u32 {
        let config = self.dir.join(format!("kube-scheduler-{scheduler_name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  kubeconfig: {}\nleaderElection:\n  leaderElect: false\n\
                 profiles:\n- schedulerName: {scheduler_name}\n",
                self.kubeconfig.display()
            ),
        )
        .expect("failed to write the kube-scheduler configuration");
        let log = self.dir.join(format!("kube-scheduler-{scheduler_name}.log"));
        let mut command = Command::new(self.bin.join("kube-scheduler"));
        command
            .arg(format!("--config={}", config.display()))
            .arg(format!("--authentication-kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--feature-gates={}", gates()))
            .args(["--bind-address", "127.0.0.1", "--secure-port", &free_port().to_string()])
            .arg(format!("--cert-dir={}", self.dir.join(format!("kube-scheduler-{scheduler_name}-certs")).display()))
            .args(["--v", "1"]);
        let pid = spawn_logged(command, &log);
        std::thread::sleep(Duration::from_millis(500));
        assert!(process::is_running(pid), "kube-scheduler exited during start-up:\n{}", log_tail(&log));
        pid
    }
}

fn gates() -> String {
    FEATURE_GATES.iter().map(|g| format!("{g}=true")).collect::<Vec<_>>().join(",")
}

fn spawn_logged(mut command: Command, log: &Path) -> u32 {
    let file = std::fs::File::create(log).expect("failed to create a log file");
    command.stdin(Stdio::null()).stdout(file.try_clone().expect("log file")).stderr(file);
    process::spawn(command).unwrap_or_else(|e| panic!("failed to start {:?}: {e}", command_name(log)))
}

fn command_name(log: &Path) -> String {
    log.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}
