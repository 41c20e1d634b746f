//! The rules between pods (`engine::pods`) at work during a cycle: the pods each node
//! holds, indexed by label, counted per topology domain and per term as pods are placed
//! and rolled back, asked of each candidate node in kube-scheduler's order, and scored
//! where a pod prefers (`scores`).

mod index;
mod keys;
mod kinds;
mod make;
mod scores;
mod tables;
pub(crate) mod work;
