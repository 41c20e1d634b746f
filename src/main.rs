//! The `muster` command: one binary, one subcommand per role.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "muster", version, about = "A gang scheduler for Kubernetes GPU clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions Muster installs, as YAML (manifests/crds/).
    Crds,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crds => match muster::k8s::crd::definitions_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("muster crds: failed to render the CRDs as YAML: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
