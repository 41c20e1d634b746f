//! The `muster` command: one binary, one subcommand per role.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use muster::config::Config;

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
    Simulate {
        /// A YAML file or folder of ordinary Kubernetes objects (Node, Pod, PodGroup, ...).
        /// May be given several times.
        #[arg(long, value_name = "PATH")]
        cluster: Vec<PathBuf>,
        /// Scheduler configuration file (default: the built-in default configuration).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Run the scheduler against a cluster: pods with `schedulerName: muster` (or the
    /// configured name) are placed by Muster.
    Scheduler {
        /// Scheduler configuration file (default: the built-in default configuration).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the in-cluster account).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Log as JSON lines instead of text.
        #[arg(long)]
        log_json: bool,
    },
    /// Print the CustomResourceDefinitions Muster installs, as YAML (manifests/crds/).
    Crds,
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

async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, String> {
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
    kube::Client::try_from(config).map_err(|e| format!("failed to build a Kubernetes client: {e}"))
}

fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Scheduler { config, kubeconfig, log_json } => {
            let config = load_config(config)?;
            let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
            if log_json {
                tracing_subscriber::fmt().json().with_env_filter(filter).init();
            } else {
                tracing_subscriber::fmt().with_env_filter(filter).init();
            }
            let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("failed to start the runtime: {e}"))?;
            runtime.block_on(async {
                let client = client(kubeconfig).await?;
                muster::k8s::scheduler::run(client, config, Default::default()).await.map_err(|e| e.to_string())
            })
        }
        Command::Crds => {
            print!("{}", muster::k8s::crd::definitions_yaml().map_err(|e| format!("failed to render the CRDs: {e}"))?);
            Ok(())
        }
        Command::Simulate { cluster, config, output } => {
            let config = load_config(config)?;
            if cluster.is_empty() {
                let text = muster::sim::scenarios::run_builtin(&config);
                match output {
                    Output::Table => print!("{}", text.table),
                    Output::Json => println!("{}", serde_json::to_string_pretty(&text.json).expect("serialisable")),
                }
                return Ok(());
            }
            let mut loaded = muster::sim::load::load(&cluster).map_err(|e| e.to_string())?;
            for note in &loaded.notes {
                eprintln!("note: {note}");
            }
            let report = muster::sim::run::run(&mut loaded.objects, &config);
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&report).expect("serialisable")),
                Output::Table => print!("{}", muster::sim::table::report_table(&report)),
            }
            Ok(())
        }
    }
}
