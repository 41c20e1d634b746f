//! The simulator and engine tables: one test binary (`cargo test --test tables`), one module
//! per area, all data-driven and with no control plane: literal snapshots and objects, YAML
//! clusters through `muster simulate`, and the committed files checked against the code.
//!
//! ```text
//!  tests/tables/main.rs ── one binary: the crate and its dependencies are linked once
//!   ├── agent                   the node agent without a cluster: NVML readings to slices, taints, labels
//!   ├── allocator               the allocator's conformance table beside Kubernetes' structured allocator
//!   ├── cel                     the CEL environment for device selectors, case by case
//!   ├── config                  the configuration file: defaults, the committed file, clear errors
//!   ├── crds                    the committed CRDs are what `muster crds` generates
//!   ├── cycle_memory            free capacity remembered between cycles gives a fresh cycle's outcomes
//!   ├── dashboards              the Grafana dashboards query only exported, documented metrics
//!   ├── dockerfile              the container image, as far as it is checked without a container engine
//!   ├── engine                  the pure engine: a snapshot in, placements and reasons out
//!   ├── incremental_snapshot    a snapshot brought up to date equals the one made afresh
//!   ├── limits                  what one tenant writes costs only its own pod
//!   ├── openb_replay            `muster simulate --openb` on a small trace in the openb format
//!   ├── opportunistic_backfill  preemptible gangs in held capacity, evicted when the reserved gang can start
//!   ├── scenarios               the built-in scenarios through the library
//!   ├── shell                   the shell's pure parts: the cache under watch events, the safety net
//!   ├── simulate                `muster simulate`: YAML in, the JSON document out, clear errors
//!   ├── simulate_device_quotas  quota keys on devices: GPUs of one kind, GPU memory
//!   ├── simulate_fractions      GPU fractions as KAI Scheduler's users write them
//!   ├── simulate_queues         team queues: fair shares, reclaim, preemption, no ping-pong
//!   ├── simulate_workloads      Jobs, JobSets, PyTorchJobs, RayJobs, LeaderWorkerSets expanded into gangs
//!   ├── timed_backfill          shadow times and what may start around what is held
//!   ├── topology                racks, blocks, best fit, the reason a gang waits for a domain
//!   ├── trace_replay            `muster simulate --trace` under every policy, as a table, JSON or a page
//!   ├── between_pods            host ports, pod affinity and anti-affinity, spread: as kube-scheduler, inside gangs too
//!   ├── preferences             preferred node affinity and PreferNoSchedule taints, weighed as kube-scheduler does
//!   ├── volumes                 bound volumes' node affinity and zones; claims missing or not bound yet
//!   ├── backfill                shared by the backfill tests: the busy four-node cluster, outcome readers
//!   └── simulated               shared by the simulate tests: `muster simulate` on a fixture of tests/sim
//! ```
//!
//! Run one area with `cargo test --test tables trace_replay::`, one test by its name.

mod agent;
mod allocator;
mod backfill;
mod between_pods;
mod cel;
mod config;
mod crds;
mod cycle_memory;
mod dashboards;
mod dockerfile;
mod engine;
mod incremental_snapshot;
mod limits;
mod openb_replay;
mod opportunistic_backfill;
mod preferences;
mod scenarios;
mod shell;
mod simulate;
mod simulate_device_quotas;
mod simulate_fractions;
mod simulate_queues;
mod simulate_workloads;
mod simulated;
mod timed_backfill;
mod topology;
mod trace_replay;

mod volumes;
