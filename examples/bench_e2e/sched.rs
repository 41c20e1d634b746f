//! The scheduler processes: starting Muster or kube-scheduler for one row, what they use
//! (/proc), a warm-up pod that shows one has synced, and stopping them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use crate::Bench;
use crate::objects::{self, BENCH_LABEL, NodeSet};
use crate::support::process;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduler {
    Muster,
    /// kube-scheduler with these client limits.
    Kube {
        qps: u32,
        burst: u32,
    },
    /// kube-scheduler with its default client limits (qps 50, burst 100).
    KubeDefaults,
}

impl Scheduler {
    pub fn label(self) -> &'static str {
        match self {
            Scheduler::Muster => "muster",
            Scheduler::Kube { .. } => "kube-scheduler",
            Scheduler::KubeDefaults => "kube-scheduler-defaults",
        }
    }

    /// For namespace and scheduler names.
    pub fn short(self) -> &'static str {
        match self {
            Scheduler::Muster => "muster",
            Scheduler::Kube { .. } => "kube",
            Scheduler::KubeDefaults => "kubedef",
        }
    }

    pub fn is_kube(self) -> bool {
        self != Scheduler::Muster
    }
}

fn folder(b: &Bench, scheduler_name: &str) -> std::path::PathBuf {
    b.cp.dir.join(format!("bench-{scheduler_name}"))
}

/// Starts `scheduler` as a child process for the pods of `scheduler_name` on `nodes`;
/// returns its pid.
pub fn start(b: &Bench, scheduler: Scheduler, scheduler_name: &str, nodes: &NodeSet) -> Result<u32, String> {
    let dir = folder(b, scheduler_name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let log = std::fs::File::create(dir.join("log")).map_err(|e| format!("creating the log: {e}"))?;
    let config = dir.join("config.yaml");
    let mut command = if scheduler == Scheduler::Muster {
        std::fs::write(
            &config,
            format!(
                "schedulerName: {scheduler_name}\nnodeSelector: {{{BENCH_LABEL}: {}}}\nmetricsAddress: 127.0.0.1:0\n",
                nodes.name
            ),
        )
        .map_err(|e| format!("writing the configuration: {e}"))?;
        let bin = std::env::var("MUSTER_BIN").unwrap_or_else(|_| "target/release/muster".into());
        let mut c = Command::new(bin);
        c.arg("scheduler")
            .arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", b.cp.kubeconfig.display()));
        c.env("RUST_LOG", std::env::var("BENCH_MUSTER_LOG").unwrap_or_else(|_| "warn".into()));
        c
    } else {
        let limits = match scheduler {
            Scheduler::Kube { qps, burst } => format!("  qps: {qps}\n  burst: {burst}\n"),
            _ => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {}\n{limits}leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {scheduler_name}\n",
                b.cp.kubeconfig.display()
            ),
        )
        .map_err(|e| format!("writing the configuration: {e}"))?;
        let mut c = Command::new(b.cp.bin.join("kube-scheduler"));
        c.arg(format!("--config={}", config.display()))
            .arg(format!("--authentication-kubeconfig={}", b.cp.kubeconfig.display()))
            .arg(format!("--authorization-kubeconfig={}", b.cp.kubeconfig.display()))
            .arg(format!("--feature-gates={}", b.kube_gates))
            .args(["--bind-address", "127.0.0.1", "--secure-port", "0", "--v", "1"]);
        c
    };
    let err = log.try_clone().map_err(|e| format!("log: {e}"))?;
    command.stdin(Stdio::null()).stdout(log).stderr(err);
    process::spawn(command).map_err(|e| format!("starting {}: {e}", scheduler.label()))
}

/// The last lines of a scheduler's log, to say why it stopped.
pub fn log_tail(b: &Bench, scheduler_name: &str) -> String {
    let text = std::fs::read_to_string(folder(b, scheduler_name).join("log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

pub fn running(pid: u32) -> bool {
    process::is_running(pid)
}

/// SIGTERM, then SIGKILL after 10 s; returns once the process has exited.
pub async fn stop(pid: u32) {
    if !running(pid) {
        return;
    }
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    let until = Instant::now() + Duration::from_secs(10);
    while running(pid) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if running(pid) {
        // SAFETY: as above.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
        while running(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Stops the scheduler and, when `BENCH_LOG_DIR` is set, copies its log there as
/// `<scheduler name>.log` (the control plane's folder goes when the bench ends).
pub async fn finish(b: &Bench, pid: u32, scheduler_name: &str) {
    stop(pid).await;
    if let Some(dir) = std::env::var_os("BENCH_LOG_DIR").map(std::path::PathBuf::from) {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::copy(folder(b, scheduler_name).join("log"), dir.join(format!("{scheduler_name}.log")));
    }
}

/// Peak resident memory (VmHWM), MiB.
pub fn peak_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

/// CPU seconds used so far (utime + stime).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "pid (comm) ": state is field 3; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks / per_second.max(1) as f64)
}

/// Creates a pod that asks nothing (`warm-up`) and waits until the scheduler binds it: by
/// then it has listed what it watches. Returns the seconds that took.
pub async fn warm_up(
    b: &Bench,
    ns: &str,
    scheduler_name: &str,
    nodes: &NodeSet,
    pid: u32,
    deadline: Instant,
) -> Result<f64, String> {
    let started = Instant::now();
    let pods: Api<Pod> = Api::namespaced(b.client.clone(), ns);
    let pod = objects::pod(nodes, scheduler_name, "warm-up", 0, &[]);
    let params = PostParams::default();
    objects::retry(|| pods.create(&params, &pod)).await.map_err(|e| format!("creating the warm-up pod: {e}"))?;
    loop {
        let bound = pods.get("warm-up").await.ok().and_then(|p| p.spec?.node_name).is_some();
        if bound {
            return Ok(started.elapsed().as_secs_f64());
        }
        if !running(pid) {
            return Err(format!(
                "the scheduler exited before binding the warm-up pod:\n{}",
                log_tail(b, scheduler_name)
            ));
        }
        if Instant::now() >= deadline {
            return Err("over budget waiting for the warm-up pod to be bound".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
