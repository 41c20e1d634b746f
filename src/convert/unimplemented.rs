//! The parts of a pod's scheduling contract Muster does not honour yet (docs/scheduling.md,
//! "kube-scheduler's plugins"). A pod to be placed that uses one waits, with a reason that
//! names the field, rather than be placed as if the field were not there (a claim Muster
//! cannot use yet says so in [`volumes`](super::volumes)). Preferences that
//! kube-scheduler only scores (preferred affinity, `ScheduleAnyway` spread) never make a
//! placement wrong, and do not hold a pod back.

use k8s_openapi::api::core::v1::{Container, PodSpec};

/// The first field of `spec` that constrains where the pod may run in a way Muster does not
/// implement, as a path a user finds in their manifest.
pub fn unimplemented_field(spec: &PodSpec) -> Option<&'static str> {
    let affinity = spec.affinity.as_ref();
    let required_affinity = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    if required_affinity.is_some_and(|terms| !terms.is_empty()) {
        return Some("spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution");
    }
    let required_anti_affinity = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    if required_anti_affinity.is_some_and(|terms| !terms.is_empty()) {
        return Some("spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution");
    }
    let spreads = spec.topology_spread_constraints.iter().flatten();
    if spreads.into_iter().any(|c| c.when_unsatisfiable == "DoNotSchedule") {
        return Some("spec.topologySpreadConstraints (whenUnsatisfiable: DoNotSchedule)");
    }
    if spec.containers.iter().any(asks_host_port) {
        return Some("spec.containers[].ports[].hostPort");
    }
    // Of the init containers, only sidecars run beside the pod and hold their ports.
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    if sidecars.into_iter().any(asks_host_port) {
        return Some("spec.initContainers[].ports[].hostPort");
    }
    None
}

/// Whether `container` asks for a port on its node's own address.
fn asks_host_port(container: &Container) -> bool {
    container.ports.iter().flatten().any(|p| p.host_port.is_some_and(|port| port > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        yaml_serde::from_str(yaml).expect("pod spec")
    }

    #[test]
    fn required_pod_affinity_spread_and_host_ports_are_named() {
        let cases = [
            (
                "containers: [{name: a}]\naffinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}",
                Some("spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
            ),
            (
                "containers: [{name: a}]\naffinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone}]}}",
                Some("spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
            ),
            (
                "containers: [{name: a}]\ntopologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
                Some("spec.topologySpreadConstraints (whenUnsatisfiable: DoNotSchedule)"),
            ),
            (
                "containers: [{name: a, ports: [{containerPort: 80, hostPort: 8080}]}]",
                Some("spec.containers[].ports[].hostPort"),
            ),
            (
                "containers: [{name: a}]\ninitContainers: [{name: s, restartPolicy: Always, ports: [{containerPort: 80, hostPort: 80}]}]",
                Some("spec.initContainers[].ports[].hostPort"),
            ),
        ];
        for (yaml, field) in cases {
            assert_eq!(unimplemented_field(&spec(yaml)), field, "{yaml}");
        }
    }

    #[test]
    fn preferences_container_ports_and_plain_volumes_hold_no_pod_back() {
        let cases = [
            "containers: [{name: a, ports: [{containerPort: 80}]}]",
            "containers: [{name: a}]\ninitContainers: [{name: i, ports: [{containerPort: 80, hostPort: 80}]}]",
            "containers: [{name: a}]\naffinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 10, podAffinityTerm: {topologyKey: zone}}]}}",
            "containers: [{name: a}]\ntopologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]",
            "containers: [{name: a}]\nvolumes: [{name: data, persistentVolumeClaim: {claimName: data}}]",
            "containers: [{name: a}]\naffinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: []}}",
        ];
        for yaml in cases {
            assert_eq!(unimplemented_field(&spec(yaml)), None, "{yaml}");
        }
    }
}
