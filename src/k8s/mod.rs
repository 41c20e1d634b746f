//! The scheduler's shell: everything that talks to the Kubernetes API server, and the
//! conversion of Kubernetes objects into the engine's model that the simulator shares.

pub mod allocation;
pub mod assemble;
pub mod backoff;
pub mod bind;
pub mod cache;
pub mod claim_bind;
pub mod claim_release;
pub mod convert;
pub mod convert_dra;
pub mod convert_kai;
pub mod convert_kueue;
pub mod convert_queues;
pub mod crd;
pub mod discovery;
pub mod explain;
pub mod explain_queue;
pub mod foreign;
pub mod gpus;
pub mod groups;
pub mod health;
pub mod kai_queue;
pub mod kueue;
pub mod leader;
pub mod quantity;
pub mod queue_crd;
pub mod queue_status;
pub mod request;
pub mod safety;
pub mod scheduler;
pub mod scheduling;
pub mod status;
pub mod view;
pub mod watch;
pub mod writer;
