//! The `muster` command: one binary, one subcommand per role.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use muster::config::Config;

/// Every role allocates many small, short-lived objects (watch events, snapshots, plans):
/// mimalloc keeps that cheap and returns freed memory in small pieces.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "muster", version, about = "A gang scheduler for Kubernetes GPU clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run Muster's scheduling on a simulated cluster. Without --cluster, run the built-in
    /// scenarios beside a per-pod baseline that places pods as kube-scheduler does.
    Simulate(SimulateArgs),
    /// Run the scheduler against a cluster: pods with `schedulerName: muster` (or the
    /// configured name) are placed by Muster.
    Scheduler(SchedulerArgs),
    /// Say why a pod or a PodGroup waits, and which placement comes nearest to fitting:
    /// `muster explain pod NAME -n NS`, `muster explain podgroup NAME -n NS` (or
    /// `podgroups.muster.dev`, `podgroups.scheduling.k8s.io`, `podgroups.scheduling.x-k8s.io`).
    Explain {
        /// pod, podgroup, a PodGroup kind by its full name (podgroups.muster.dev, ...), or
        /// queue (cluster-scoped: the namespace is ignored).
        resource: String,
        name: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// The scheduler's configuration file, for its scheduler name, nodes and topology.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster account).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// Run the node agent on a GPU node: publish its GPUs as ResourceSlices (driver mode) or
    /// take NVIDIA's driver's failing devices out of service (companion mode).
    Agent(muster::agent::options::AgentOptions),
    /// Print the CustomResourceDefinitions Muster installs, as YAML (manifests/crds/).
    Crds,
    /// What each queue and namespace used over a period (GPU-hours, share of quota and of
    /// the fleet, waits), what stood stranded or held, and the evictions, from the
    /// scheduler's counters in Prometheus or from a simulator run (docs/reports.md).
    Report {
        /// The Prometheus server that scrapes the scheduler (http://host:port).
        #[arg(long, value_name = "URL", required_unless_present = "simulation", conflicts_with = "simulation")]
        prometheus: Option<String>,
        /// Instead: a trace replay's JSON (`muster simulate --trace FILE ... --output json`).
        #[arg(long, value_name = "FILE")]
        simulation: Option<PathBuf>,
        /// With --simulation: which policy's run (default: the default configuration's).
        #[arg(long, value_name = "NAME", requires = "simulation")]
        policy: Option<String>,
        /// With --prometheus: the period, up to now: 1h, 24h, 7d.
        #[arg(long, default_value = "7d")]
        since: String,
        /// table, csv, or html FILE: a self-contained page with plots.
        #[arg(long, num_args = 1..=2, value_names = ["FORMAT", "FILE"], default_value = "table")]
        output: Vec<String>,
    },
}

/// The options of `muster simulate`.
#[derive(Args)]
struct SimulateArgs {
    /// A YAML file or folder of ordinary Kubernetes objects (Node, Pod, PodGroup, ...).
    /// May be given several times.
    #[arg(long, value_name = "PATH")]
    cluster: Vec<PathBuf>,
    /// Scheduler configuration file (default: the built-in default configuration).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// table, json, or (with --trace) html FILE: a self-contained page with plots.
    #[arg(long, num_args = 1..=2, value_names = ["FORMAT", "FILE"], default_value = "table")]
    output: Vec<String>,
    /// The simulation's clock (RFC 3339, such as 2026-12-04T09:00:00Z); default: the
    /// newest creationTimestamp or startTime in the input. Waits and minimum runtimes
    /// are measured against it.
    #[arg(long, value_name = "TIME")]
    now: Option<String>,
    /// The most scheduling cycles; the run stops earlier when a cycle changes nothing.
    /// Evicted pods are pending again in the next cycle, as their controller would
    /// recreate them.
    #[arg(long, value_name = "N", default_value_t = 100)]
    cycles: usize,
    /// Built-in scenarios only: also run the overloaded fleet (half as many jobs again,
    /// more work than can be done by the horizon) under every policy.
    #[arg(long)]
    overloaded: bool,
    /// Replay a job trace (CSV; docs/simulator.md) under every policy, on the Node
    /// objects of --cluster or on a generated cluster (--nodes).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// A generated cluster of N nodes, for --trace or --generate-trace.
    #[arg(long, value_name = "N")]
    nodes: Option<usize>,
    #[arg(long, value_name = "G", default_value_t = 8)]
    gpus_per_node: u32,
    /// Racks of the generated cluster (default: one per 8 nodes); nodes are numbered
    /// across racks, two racks to a block.
    #[arg(long, value_name = "R")]
    racks: Option<usize>,
    /// How long the replay runs (default: the last submission plus the longest runtime).
    #[arg(long, value_name = "H")]
    horizon_hours: Option<f64>,
    /// Write a trace of the built-in fleet's job mix, --jobs jobs for --nodes nodes, and
    /// stop.
    #[arg(long, value_name = "FILE")]
    generate_trace: Option<PathBuf>,
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    jobs: usize,
    /// With --trace: only these columns (baseline, StrictFIFO, BestEffortFIFO, Backfill,
    /// TimedBackfill); may be given several times. Default: all of them.
    #[arg(long, value_name = "NAME")]
    policy: Vec<String>,
    #[arg(long, value_name = "SEED", default_value_t = 7)]
    seed: u64,
    /// Replay Alibaba's openb GPU-sharing trace (the folder of its CSV files) under its
    /// paper's protocol: pods arrive until they ask for 130% of the GPUs, none leaves.
    #[arg(long, value_name = "DIR")]
    openb: Option<PathBuf>,
    /// With --openb: which pod list (openb_pod_list_<NAME>.csv).
    #[arg(long, value_name = "NAME", default_value = "default")]
    openb_workload: String,
    /// With --openb: the seeds, FIRST-LAST or a comma-separated list.
    #[arg(long, value_name = "SEEDS", default_value = "42-51")]
    seeds: String,
}

/// The options of `muster scheduler`.
#[derive(Args)]
struct SchedulerArgs {
    /// Scheduler configuration file (default: the built-in default configuration).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster account).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
    /// Run as one of several replicas: only the holder of the Lease schedules
    /// (overrides leaderElection.enabled).
    #[arg(long)]
    leader_elect: bool,
    /// Name of the Lease (overrides leaderElection.leaseName).
    #[arg(long, value_name = "NAME")]
    lease_name: Option<String>,
    /// Namespace of the Lease (overrides leaderElection.leaseNamespace; in a pod, its own).
    #[arg(long, value_name = "NAMESPACE", env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds before a lease that is not renewed is taken over (overrides
    /// leaderElection.leaseDurationSeconds).
    #[arg(long, value_name = "SECONDS")]
    lease_duration_seconds: Option<u64>,
    /// Where /metrics, /healthz and /readyz are served (overrides metricsAddress).
    #[arg(long, value_name = "ADDRESS")]
    metrics_address: Option<String>,
}

fn main() -> ExitCode {
    match run(Cli::parse().command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("muster: {message}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(path: Option<PathBuf>) -> Result<Config, String> {
    match path {
        Some(path) => Config::load(&path).map_err(|e| e.to_string()),
        None => Ok(Config::default()),
    }
}

async fn client(
    kubeconfig: Option<PathBuf>,
    connection: &muster::config::ClientConnection,
) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(&path)
                .map_err(|e| format!("failed to read {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| format!("bad kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| format!("no kubeconfig or in-cluster configuration: {e}"))?,
    };
    muster::k8s::client::request::client(config, connection)
        .map_err(|e| format!("failed to build a Kubernetes client: {e}"))
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    if json {
        tracing_subscriber::fmt().json().with_env_filter(filter).init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
}

/// Runs one subcommand.
fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Scheduler(args) => scheduler(args),
        Command::Explain { resource, name, namespace, config, kubeconfig } => {
            explain(&resource, &name, &namespace, config, kubeconfig)
        }
        Command::Agent(options) => agent(options),
        Command::Report { prometheus, simulation, policy, since, output } => {
            report(prometheus, simulation, policy, &since, &output)
        }
        Command::Crds => {
            print!(
                "{}",
                muster::api::pod_group::definitions_yaml().map_err(|e| format!("failed to render the CRDs: {e}"))?
            );
            Ok(())
        }
        Command::Simulate(args) => simulate(args),
    }
}

/// A Tokio runtime for the subcommands that talk to the API server.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Runtime::new().map_err(|e| format!("failed to start the runtime: {e}"))
}

/// `muster scheduler`: the configuration with the command line's overrides, then the
/// scheduler's process until it stops.
fn scheduler(args: SchedulerArgs) -> Result<(), String> {
    let mut config = load_config(args.config)?;
    let election = &mut config.leader_election;
    election.enabled |= args.leader_elect;
    election.lease_name = args.lease_name.unwrap_or(election.lease_name.clone());
    election.lease_namespace = args.lease_namespace.unwrap_or(election.lease_namespace.clone());
    if let Some(seconds) = args.lease_duration_seconds {
        // The other timings keep their proportions to the lease duration.
        election.lease_duration_seconds = seconds.max(3);
        election.renew_deadline_seconds = (election.lease_duration_seconds * 2 / 3).max(2);
        election.retry_period_seconds = (election.lease_duration_seconds / 5).max(1);
        // Requests must end before a standby may take over.
        let gap = election.lease_duration_seconds - election.renew_deadline_seconds;
        config.request_timeout_seconds = config.request_timeout_seconds.min(gap.saturating_sub(1)).max(1);
    }
    config.metrics_address = args.metrics_address.unwrap_or(config.metrics_address);
    init_logging(args.log_json);
    runtime()?.block_on(async {
        let client = client(args.kubeconfig, &config.client_connection).await?;
        muster::k8s::scheduler::run_process(client, config).await
    })
}

/// `muster explain`: why a pod, PodGroup or queue waits, printed.
fn explain(
    resource: &str,
    name: &str,
    namespace: &str,
    config: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
) -> Result<(), String> {
    let config = load_config(config)?;
    let target = muster::cli::explain::target(resource, namespace, name).map_err(|e| e.to_string())?;
    runtime()?.block_on(async {
        let client = client(kubeconfig, &config.client_connection).await?;
        let text = muster::cli::explain::explain(&client, &config, &target).await.map_err(|e| e.to_string())?;
        print!("{text}");
        Ok(())
    })
}

/// `muster agent`: the node agent, or with `--dry-run` what it would publish, printed.
fn agent(options: muster::agent::options::AgentOptions) -> Result<(), String> {
    if options.dry_run {
        print!("{}", muster::agent::run::dry_run(&options).map_err(|e| e.to_string())?);
        return Ok(());
    }
    init_logging(options.log_json);
    runtime()?.block_on(async {
        let client = client(options.kubeconfig.clone(), &Default::default()).await?;
        muster::agent::serve(client, options).await.map_err(|e| e.to_string())
    })
}

/// `muster report`: a usage report from Prometheus or from a simulation's JSON, printed.
fn report(
    prometheus: Option<String>,
    simulation: Option<PathBuf>,
    policy: Option<String>,
    since: &str,
    output: &[String],
) -> Result<(), String> {
    use muster::report::command;
    let output = command::Output::parse(output)?;
    let report = match (prometheus, simulation) {
        (Some(url), _) => command::from_prometheus(&url, muster::report::parse_since(since)?)?,
        (None, Some(path)) => command::from_simulation(&path, policy.as_deref())?,
        (None, None) => return Err("give --prometheus URL or --simulation FILE".into()),
    };
    print!("{}", output.write(&report)?);
    Ok(())
}

/// `muster simulate`: an openb replay, a generated trace, a trace replay, the built-in
/// scenarios, or the cluster read from files, whichever the options ask for first.
fn simulate(mut args: SimulateArgs) -> Result<(), String> {
    use muster::sim::replay::command as replay;
    let config = load_config(args.config.take())?;
    let format = replay::Format::parse(&args.output)?;
    if let Some(dir) = args.openb.take() {
        return simulate_openb(dir, &args, format, &config);
    }
    if let Some(path) = args.generate_trace {
        let nodes = args.nodes.ok_or("--generate-trace needs --nodes, the cluster the trace is made for")?;
        print!("{}", muster::sim::scenarios::generate_trace(&path, args.jobs, nodes, args.seed)?);
        return Ok(());
    }
    if let Some(trace) = args.trace.take() {
        return simulate_trace(trace, args, format, &config);
    }
    let output = match format {
        replay::Format::Table => Output::Table,
        replay::Format::Json => Output::Json,
        replay::Format::Html(_) => return Err("--output html is for --trace replays".into()),
    };
    if args.cluster.is_empty() {
        let text = muster::sim::builtin::run_builtin(&config, args.overloaded);
        match output {
            Output::Table => print!("{}", text.table),
            Output::Json => println!("{}", serde_json::to_string_pretty(&text.json).expect("serialisable")),
        }
        return Ok(());
    }
    simulate_cluster(&args.cluster, args.now, args.cycles, output, &config)
}

/// `muster simulate --openb DIR`: Alibaba's openb trace replayed for each seed, printed as
/// a table or JSON.
fn simulate_openb(
    dir: PathBuf,
    args: &SimulateArgs,
    format: muster::sim::replay::command::Format,
    config: &Config,
) -> Result<(), String> {
    use muster::sim::replay::command as replay;
    let seeds = parse_seeds(&args.seeds)?;
    let json = match format {
        replay::Format::Table => false,
        replay::Format::Json => true,
        replay::Format::Html(_) => return Err("--openb writes a table or json".into()),
    };
    let options = muster::sim::openb::OpenbOptions { dir, workload: args.openb_workload.clone(), seeds, json };
    let report = muster::sim::openb::replay(&options, config)?;
    match options.json {
        true => println!("{}", serde_json::to_string_pretty(&report).expect("serialisable")),
        false => print!("{}", muster::sim::openb::table(&report)),
    }
    Ok(())
}

/// `muster simulate --trace FILE`: the trace replayed under each policy on the cluster of
/// --cluster or a generated one of --nodes.
fn simulate_trace(
    trace: PathBuf,
    args: SimulateArgs,
    format: muster::sim::replay::command::Format,
    config: &Config,
) -> Result<(), String> {
    use muster::sim::replay::command as replay;
    let cluster = match (args.nodes, args.cluster.is_empty()) {
        (Some(n), true) => replay::ClusterSource::Generated(replay::generated(n, args.gpus_per_node, args.racks)?),
        (None, false) => replay::ClusterSource::Files(args.cluster),
        (Some(_), false) => return Err("give either --cluster or --nodes for the trace, not both".into()),
        (None, true) => return Err("--trace needs a cluster: --cluster FILE or --nodes N".into()),
    };
    let options =
        replay::TraceOptions { trace, cluster, horizon_hours: args.horizon_hours, format, policies: args.policy };
    print!("{}", replay::run(&options, config)?);
    Ok(())
}

/// `muster simulate --cluster PATH`: the cluster read from files, scheduled cycle by cycle
/// from `now`, with notes on what was skipped, and the report printed.
fn simulate_cluster(
    cluster: &[PathBuf],
    now: Option<String>,
    cycles: usize,
    output: Output,
    config: &Config,
) -> Result<(), String> {
    let mut loaded = muster::sim::load::load(cluster).map_err(|e| e.to_string())?;
    for note in &loaded.notes {
        eprintln!("note: {note}");
    }
    let now = match now {
        Some(text) => Some(
            text.parse::<k8s_openapi::jiff::Timestamp>()
                .map_err(|e| format!("--now {text:?} is not an RFC 3339 time: {e}"))?
                .as_second(),
        ),
        None => None,
    };
    note_skipped_queues(&loaded.objects, config);
    let options = muster::sim::run::SimOptions { now, cycles };
    let report = muster::sim::run::run_with(&mut loaded.objects, config, &options);
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report).expect("serialisable")),
        Output::Table => print!("{}", muster::sim::table::report_table(&report)),
    }
    Ok(())
}

/// Notes, on stderr, the KAI and Kueue queues and groups in the files that the
/// configuration does not import.
fn note_skipped_queues(objects: &muster::convert::assemble::ClusterObjects, config: &Config) {
    let kai = objects.kai_queues.len() + objects.kai_groups.len();
    if kai > 0 && !config.queues.imports(muster::config::QueueImport::Kai) {
        eprintln!(
            "note: {kai} KAI Queue(s) and PodGroup(s) (scheduling.run.ai) skipped: add `queues: {{import: [kai]}}` to the configuration to read them"
        );
    }
    let kueue = objects.cluster_queues.len() + objects.local_queues.len();
    if kueue > 0 && !config.queues.imports(muster::config::QueueImport::Kueue) {
        eprintln!(
            "note: {kueue} Kueue ClusterQueue(s) and LocalQueue(s) skipped: add `queues: {{import: [kueue]}}` to the configuration to read them"
        );
    }
}

/// Seeds as `FIRST-LAST` or `A,B,C`.
fn parse_seeds(text: &str) -> Result<Vec<u64>, String> {
    let bad = || format!("--seeds {text:?}: give FIRST-LAST (42-51) or a comma-separated list");
    if let Some((first, last)) = text.split_once('-') {
        let (first, last): (u64, u64) =
            (first.trim().parse().map_err(|_| bad())?, last.trim().parse().map_err(|_| bad())?);
        return if first <= last && last - first < 1000 { Ok((first..=last).collect()) } else { Err(bad()) };
    }
    text.split(',').map(|s| s.trim().parse().map_err(|_| bad())).collect()
}
