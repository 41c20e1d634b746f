//! What the scheduler says about itself: `/healthz` and `/readyz` ([`health`]).

pub mod health;
