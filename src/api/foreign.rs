//! Other projects' PodGroup types that Muster reads, so tools that create them work unchanged.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`), as Kubeflow and JobSet
/// set-ups create it. Pods join with the label `scheduling.x-k8s.io/pod-group`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(derive = "PartialEq")]
#[kube(group = "scheduling.x-k8s.io", version = "v1alpha1", kind = "PodGroup", plural = "podgroups", namespaced)]
#[kube(crates(kube_core = "kube::core"))]
#[serde(rename_all = "camelCase")]
pub struct PluginPodGroupSpec {
    #[serde(default)]
    pub min_member: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

pub type PluginPodGroup = PodGroup;
