//! What kube-scheduler only scores, ranked as its default profile ranks it before Muster's
//! own packing: preferred node affinity (NodeAffinity, weight 2) and PreferNoSchedule taints
//! (TaintToleration, weight 3), each normalised over the nodes that fit.

use crate::between_pods::{pod, pod_report, simulate};

fn node(name: &str, zone: &str, taints: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}}}}}\nspec: {{taints: [{taints}]}}\nstatus: {{allocatable: {{cpu: '8', memory: 16Gi, pods: '10'}}}}\n"
    )
}

fn prefers(zone: &str, weight: u32) -> String {
    format!(
        "  affinity: {{nodeAffinity: {{preferredDuringSchedulingIgnoredDuringExecution: [{{weight: {weight}, preference: {{matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [{zone}]}}]}}}}]}}}}\n"
    )
}

const AVOID: &str = "{key: spot, value: 'true', effect: PreferNoSchedule}";

#[test]
fn each_pod_goes_to_the_zone_its_preferred_node_affinity_names() {
    let yaml =
        node("n1", "a", "") + &node("n2", "b", "") + &pod("to-b", &prefers("b", 50)) + &pod("to-a", &prefers("a", 1));
    let report = simulate("preferred-zones", &yaml);
    assert_eq!(pod_report(&report, "to-b")["node"], "n2", "{report}");
    assert_eq!(pod_report(&report, "to-a")["node"], "n1", "{report}");
}

#[test]
fn a_prefer_no_schedule_taint_turns_away_a_pod_that_has_another_node_unless_it_tolerates_it() {
    let tolerates = "  tolerations: [{key: spot, operator: Exists}]\n";
    let yaml = node("n1", "a", AVOID) + &node("n2", "b", "") + &pod("plain", "") + &pod("tolerant", tolerates);
    let report = simulate("prefer-no-schedule", &yaml);
    assert_eq!(pod_report(&report, "plain")["node"], "n2", "{report}");
    // Tolerated, the taint weighs nothing: the tolerant pod goes where packing puts it, the
    // node the plain pod already uses.
    assert_eq!(pod_report(&report, "tolerant")["node"], "n2", "{report}");
    // With room only on the tainted node, a pod still goes there: a preference, not a filter.
    let full = node("n1", "a", AVOID) + &node("n2", "b", "{key: gone, effect: NoSchedule}") + &pod("only", "");
    assert_eq!(pod_report(&simulate("prefer-only", &full), "only")["node"], "n1");
}

#[test]
fn the_taint_outweighs_the_preferred_zone_as_kube_schedulers_weights_have_it() {
    // n1: the preferred zone (2 × 100) but a taint (3 × 0); n2: neither (2 × 0 + 3 × 100).
    let yaml = node("n1", "a", AVOID) + &node("n2", "b", "") + &pod("web", &prefers("a", 100));
    assert_eq!(pod_report(&simulate("taint-over-zone", &yaml), "web")["node"], "n2");
}
