//! The Helm chart, `charts/muster/`: `helm lint` passes; `helm template` with default values
//! renders exactly the objects of `kubectl kustomize manifests/` (compared object by object,
//! nothing normalised: the chart names the scheduler's ConfigMap with kustomize's own hash);
//! each value changes what it says; and `helm install` on the test control plane creates
//! objects with which the scheduler, running with only its service account's permissions,
//! binds a gang. Helm is the one `hack/build-helm.sh` builds at the pinned version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::Pod;
use muster::api::pod_group::{PodGroup, PodGroupSpec};
use muster::config::Config;
use muster::k8s::scheduler::Options;
use muster::metrics::Metrics;
use serde_json::Value;

use crate::install::{INSTALLED, MANIFESTS, scheduler_client};
use crate::support::cluster::TEST_LABEL;
use crate::support::control_plane::control_plane;
use crate::support::wait::{node_of, wait_for_pods};
use crate::support::{KubeletEmulator, TestCluster, builders, muster as scheduler, process};

/// Every object `kubectl kustomize manifests/` renders, as [`key`] names it.
const OBJECTS: &[&str] = &[
    "Namespace v1 /muster-system",
    "CustomResourceDefinition apiextensions.k8s.io/v1 /podgroups.muster.dev",
    "CustomResourceDefinition apiextensions.k8s.io/v1 /queues.muster.dev",
    "DeviceClass resource.k8s.io/v1 /gpu.muster.dev",
    "ServiceAccount v1 muster-system/muster-scheduler",
    "ClusterRole rbac.authorization.k8s.io/v1 /muster-scheduler",
    "ClusterRoleBinding rbac.authorization.k8s.io/v1 /muster-scheduler",
    "Role rbac.authorization.k8s.io/v1 muster-system/muster-scheduler-leader-election",
    "RoleBinding rbac.authorization.k8s.io/v1 muster-system/muster-scheduler-leader-election",
    "ConfigMap v1 muster-system/muster-scheduler-config-bcbk66bbfg",
    "Deployment apps/v1 muster-system/muster-scheduler",
    "Service v1 muster-system/muster-scheduler-metrics",
    "MutatingAdmissionPolicy admissionregistration.k8s.io/v1 /muster-gpu-fraction-claim",
    "MutatingAdmissionPolicyBinding admissionregistration.k8s.io/v1 /muster-gpu-fraction-claim",
    "ServiceAccount v1 muster-system/muster-agent",
    "ClusterRole rbac.authorization.k8s.io/v1 /muster-agent",
    "ClusterRoleBinding rbac.authorization.k8s.io/v1 /muster-agent",
    "ValidatingAdmissionPolicy admissionregistration.k8s.io/v1 /muster-agent-own-node",
    "ValidatingAdmissionPolicyBinding admissionregistration.k8s.io/v1 /muster-agent-own-node",
    "DaemonSet apps/v1 muster-system/muster-agent",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> String {
    repo().join("charts/muster").to_string_lossy().into_owned()
}

/// The folder holding `helm`: `$MUSTER_HELM_BIN` when the test command set it, otherwise
/// whatever `hack/build-helm.sh` builds or finds in its cache.
fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = crate::support::control_plane::built(
            "MUSTER_HELM_BIN",
            "build-helm.sh",
            "Helm at the version pinned in hack/helm/go.mod",
        );
        assert!(
            dir.join("helm").is_file(),
            "helm is missing from {}: run hack/build-helm.sh (it prints the folder to set MUSTER_HELM_BIN to)",
            dir.display()
        );
        dir
    })
}

/// Helm's own folders (configuration, cache, data), apart from the user's.
fn helm_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("muster-e2e-helm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("failed to create Helm's folder");
        process::remove_at_exit(dir.clone());
        dir
    })
}

/// Runs helm; its stdout, or what it said on stderr as the error.
fn try_helm(args: &[&str]) -> Result<String, String> {
    let home = helm_home();
    let output = Command::new(helm_bin().join("helm"))
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .map_err(|e| format!("failed to run helm: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn helm(args: &[&str]) -> String {
    try_helm(args).unwrap_or_else(|e| panic!("helm {} failed:\n{e}", args.join(" ")))
}

/// The chart rendered with default values but for `args` (`--set ...`).
fn template(args: &[&str]) -> BTreeMap<String, Value> {
    let mut all = vec!["template", "muster", chart_ref()];
    all.extend_from_slice(args);
    objects(&helm(&all))
}

fn chart_ref() -> &'static str {
    static CHART: OnceLock<String> = OnceLock::new();
    CHART.get_or_init(chart)
}

fn kustomized() -> BTreeMap<String, Value> {
    let dir = repo().join("manifests");
    let out = control_plane()
        .kubectl(&["kustomize", &dir.to_string_lossy()])
        .unwrap_or_else(|e| panic!("kubectl kustomize manifests/ failed:\n{e}"));
    objects(&out)
}

/// `Kind apiVersion namespace/name`: what makes two objects the same object.
fn key(object: &Value) -> String {
    let field = |path: &str| object.pointer(path).and_then(Value::as_str).unwrap_or("").to_string();
    format!("{} {} {}/{}", field("/kind"), field("/apiVersion"), field("/metadata/namespace"), field("/metadata/name"))
}

/// The objects of a multi-document YAML stream, by [`key`]; the same object twice fails.
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for document in yaml_serde::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(document).expect("a YAML document");
        if value.is_null() {
            continue;
        }
        let key = key(&value);
        assert!(all.insert(key.clone(), value).is_none(), "{key} is rendered twice");
    }
    all
}

/// Every difference between the objects kustomize rendered and those Helm rendered: objects
/// only one of them has, and each field where an object differs.
fn differences(kustomize: &BTreeMap<String, Value>, helm: &BTreeMap<String, Value>) -> Vec<String> {
    let mut found = Vec::new();
    for (key, object) in kustomize {
        match helm.get(key) {
            None => found.push(format!("{key}: only in kubectl kustomize")),
            Some(other) => diff(&format!("{key}: "), object, other, &mut found),
        }
    }
    found.extend(helm.keys().filter(|k| !kustomize.contains_key(*k)).map(|k| format!("{k}: only in helm template")));
    found
}

fn diff(path: &str, kustomize: &Value, helm: &Value, found: &mut Vec<String>) {
    match (kustomize, helm) {
        (Value::Object(a), Value::Object(b)) => {
            for name in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let field = format!("{path}.{name}");
                match (a.get(name), b.get(name)) {
                    (Some(x), Some(y)) => diff(&field, x, y, found),
                    (Some(x), None) => found.push(format!("{field}: {x} (kustomize), absent (helm)")),
                    (None, y) => {
                        found.push(format!("{field}: absent (kustomize), {} (helm)", y.unwrap_or(&Value::Null)))
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, found);
            }
        }
        (a, b) if a != b => found.push(format!("{path}: {a} (kustomize) != {b} (helm)")),
        _ => {}
    }
}

fn the<'a>(objects: &'a BTreeMap<String, Value>, kind: &str, name: &str) -> &'a Value {
    objects
        .values()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", objects.keys().collect::<Vec<_>>()))
}

fn has(objects: &BTreeMap<String, Value>, kind: &str) -> bool {
    objects.values().any(|o| o["kind"] == kind)
}

fn strings(value: &Value) -> Vec<&str> {
    value.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// The scheduler's configuration as the rendered ConfigMap holds it, and the ConfigMap's name.
fn scheduler_config(objects: &BTreeMap<String, Value>) -> (String, String) {
    let deployment = the(objects, "Deployment", "muster-scheduler");
    let name = deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
        .as_str()
        .expect("the Deployment mounts a ConfigMap")
        .to_string();
    let text = the(objects, "ConfigMap", &name)["data"]["config.yaml"].as_str().expect("config.yaml").to_string();
    (name, text)
}

#[test]
fn helm_lint_passes_and_the_packaged_chart_renders_the_same() {
    let out = helm(&["lint", "--strict", chart_ref()]);
    assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{out}");
    // `helm package` stores the linked manifests themselves: the archive renders what the
    // folder renders.
    let dir = helm_home().join("package");
    helm(&["package", chart_ref(), "--destination", &dir.to_string_lossy()]);
    let archive = dir.join("muster-0.1.0.tgz");
    let packaged = objects(&helm(&["template", "muster", &archive.to_string_lossy()]));
    assert_eq!(packaged, template(&[]), "the packaged chart renders other objects");
}

#[test]
fn helm_template_renders_the_objects_of_kubectl_kustomize() {
    let kustomize = kustomized();
    let helm = template(&[]);
    assert_eq!(kustomize.keys().map(String::as_str).collect::<Vec<_>>(), {
        let mut all = OBJECTS.to_vec();
        all.sort();
        all
    });
    let found = differences(&kustomize, &helm);
    assert!(found.is_empty(), "helm template and kubectl kustomize manifests/ differ:\n{}", found.join("\n"));

    // The comparison sees a change on either side: a value, an object left out, a field of
    // the kustomization's.
    let three = differences(&kustomize, &template(&["--set", "scheduler.replicas=3"]));
    assert_eq!(
        three,
        ["Deployment apps/v1 muster-system/muster-scheduler: .spec.replicas: 2 (kustomize) != 3 (helm)"],
        "{three:#?}"
    );
    let no_agent = differences(&kustomize, &template(&["--set", "agent.enabled=false"]));
    assert!(no_agent.contains(&"DaemonSet apps/v1 muster-system/muster-agent: only in kubectl kustomize".to_string()));
    let mut edited = kustomize.clone();
    let policy = edited.get_mut("ValidatingAdmissionPolicy admissionregistration.k8s.io/v1 /muster-agent-own-node");
    policy.expect("the policy")["spec"]["failurePolicy"] = "Ignore".into();
    assert_eq!(differences(&edited, &helm).len(), 1, "a changed field of the kustomization is a difference");
}

#[test]
fn the_values_change_what_they_say() {
    let defaults = template(&[]);
    let (default_map, _) = scheduler_config(&defaults);
    let set = template(&[
        "--set",
        "image.repository=registry.example.com/muster,image.tag=1.2.3,image.pullPolicy=Always",
        "--set",
        "scheduler.replicas=3,scheduler.name=gpu-scheduler,scheduler.nodeSelector.pool=system",
        "--set",
        "scheduler.resources.limits.memory=4Gi,agent.resources.requests.cpu=100m",
        "--set",
        "agent.mode=driver,agent.sharing=true,imagePullSecrets[0].name=registry",
    ]);
    let deployment = &the(&set, "Deployment", "muster-scheduler")["spec"];
    let daemonset = &the(&set, "DaemonSet", "muster-agent")["spec"]["template"]["spec"];
    assert_eq!(deployment["replicas"], 3);
    let pod = &deployment["template"]["spec"];
    for container in [&pod["containers"][0], &daemonset["containers"][0]] {
        assert_eq!(container["image"], "registry.example.com/muster:1.2.3");
        assert_eq!(container["imagePullPolicy"], "Always");
    }
    assert_eq!(pod["imagePullSecrets"][0]["name"], "registry");
    assert_eq!(daemonset["imagePullSecrets"][0]["name"], "registry");
    assert_eq!(pod["nodeSelector"], serde_json::json!({"pool": "system"}));
    assert_eq!(pod["containers"][0]["resources"]["limits"]["memory"], "4Gi");
    assert_eq!(daemonset["containers"][0]["resources"]["requests"]["cpu"], "100m");
    let args = strings(&daemonset["containers"][0]["args"]);
    assert!(args.contains(&"--mode=driver") && args.contains(&"--sharing"), "{args:?}");
    // The scheduler name goes into the configuration, which keeps its comments, and the
    // changed configuration is a ConfigMap of another name, so the Deployment rolls.
    let (name, text) = scheduler_config(&set);
    assert_ne!(name, default_map);
    assert!(text.starts_with("# The scheduler's configuration"), "{text}");
    let config = Config::parse(&text, "the chart's configuration").expect("a valid configuration");
    assert_eq!(config.scheduler_name, "gpu-scheduler");
    assert!(config.leader_election.enabled);
    // The admission policy names the claims of GPU fractions for the pods of that name.
    let policy = &the(&set, "MutatingAdmissionPolicy", "muster-gpu-fraction-claim")["spec"];
    assert_eq!(
        policy["matchConditions"][0]["expression"],
        "has(object.spec.schedulerName) && object.spec.schedulerName == 'gpu-scheduler'"
    );

    // A configuration file of one's own: the scheduler name is added, and the Role grants
    // the Lease it names.
    let file = helm_home().join("config-of-ones-own.yaml");
    std::fs::write(&file, "leaderElection:\n  enabled: true\n  leaseName: gpu-lease\nmetricsAddress: 0.0.0.0:10251\n")
        .expect("write the configuration");
    let own = template(&["--set-file", &format!("scheduler.config={}", file.display())]);
    let config = Config::parse(&scheduler_config(&own).1, "the configuration of one's own").expect("valid");
    assert_eq!((config.scheduler_name.as_str(), config.leader_election.lease_name.as_str()), ("muster", "gpu-lease"));
    let role = the(&own, "Role", "muster-scheduler-leader-election");
    assert_eq!(strings(&role["rules"][1]["resourceNames"]), ["gpu-lease"]);
    std::fs::write(&file, "metricsAddress: 0.0.0.0:9090\n").expect("write the configuration");
    let refused =
        try_helm(&["template", "muster", chart_ref(), "--set-file", &format!("scheduler.config={}", file.display())]);
    assert!(refused.as_ref().is_err_and(|e| e.contains("must be on port 10251")), "{refused:?}");

    // Without the agent: none of its objects, nor the DeviceClass of the GPUs it publishes.
    let no_agent = template(&["--set", "agent.enabled=false"]);
    for kind in ["DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DeviceClass"] {
        assert!(!has(&no_agent, kind), "{kind} rendered without the agent");
    }
    assert!(!no_agent.keys().any(|k| k.ends_with("/muster-agent")), "{:?}", no_agent.keys());
    assert!(has(&no_agent, "Deployment"));
    // In companion mode the GPUs are NVIDIA's driver's: no DeviceClass of Muster's.
    let companion = template(&["--set", "agent.mode=companion"]);
    assert!(!has(&companion, "DeviceClass"));
    let args =
        the(&companion, "DaemonSet", "muster-agent")["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(strings(&args).contains(&"--mode=companion"), "{args}");
    let refused = try_helm(&["template", "muster", chart_ref(), "--set", "agent.mode=sideways"]);
    assert!(refused.as_ref().is_err_and(|e| e.contains("/agent/mode")), "{refused:?}");

    // CRDs and the namespace.
    assert!(!has(&template(&["--set", "crds.enabled=false"]), "CustomResourceDefinition"));
    assert!(!has(&template(&["--set", "namespace.create=false"]), "Namespace"));
    let kept = template(&["--set", "crds.keep=true"]);
    let crd = the(&kept, "CustomResourceDefinition", "podgroups.muster.dev");
    assert_eq!(crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    assert!(defaults.values().all(|o| o["metadata"].get("annotations").is_none()), "no annotations by default");
}

#[test]
fn the_service_monitor_is_rendered_where_the_prometheus_operator_serves_it() {
    const API: &str = "monitoring.coreos.com/v1/ServiceMonitor";
    assert!(!has(&template(&[]), "ServiceMonitor"), "no ServiceMonitor where the API is not served");
    let served = template(&["--api-versions", API]);
    let monitor = the(&served, "ServiceMonitor", "muster-scheduler");
    // It selects the metrics Service, by its labels and port name.
    let service = the(&served, "Service", "muster-scheduler-metrics");
    let selector = monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels");
    assert!(!selector.is_empty());
    for (label, value) in selector {
        assert_eq!(&service["metadata"]["labels"][label], value, "the Service's label {label}");
    }
    assert_eq!(service["metadata"]["namespace"], "muster-system");
    assert_eq!(strings(&monitor["spec"]["namespaceSelector"]["matchNames"]), ["muster-system"]);
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], service["spec"]["ports"][0]["name"]);
    assert!(!has(
        &template(&["--api-versions", API, "--set", "metrics.serviceMonitor.enabled=false"]),
        "ServiceMonitor"
    ));
    let forced = template(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.interval=15s",
        "--set",
        "metrics.serviceMonitor.labels.release=prometheus",
    ]);
    let monitor = the(&forced, "ServiceMonitor", "muster-scheduler");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "15s");
}

/// `metrics.auth` and `metrics.ui`: the token's Secret is mounted, the configuration names
/// its file (and the page's setting), and the ServiceMonitor sends it; a configuration of
/// one's own that sets `metricsServer` too is refused rather than overridden.
#[test]
fn a_metrics_token_is_mounted_named_in_the_configuration_and_sent_by_the_service_monitor() {
    let set = template(&[
        "--set",
        "metrics.auth.secretName=muster-metrics,metrics.ui=Open,metrics.serviceMonitor.enabled=true",
    ]);
    let config = Config::parse(&scheduler_config(&set).1, "the rendered configuration").expect("valid");
    assert_eq!(config.metrics_server.bearer_token_file, "/etc/muster-metrics/token");
    assert_eq!(config.metrics_server.ui, muster::metrics::access::UiAccess::Open);
    let pod = &the(&set, "Deployment", "muster-scheduler")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][1]["secret"]["secretName"], "muster-metrics", "{pod}");
    let mount = &pod["containers"][0]["volumeMounts"][1];
    assert_eq!(
        (mount["name"].as_str(), mount["mountPath"].as_str()),
        (Some("metrics-token"), Some("/etc/muster-metrics"))
    );
    let endpoint = &the(&set, "ServiceMonitor", "muster-scheduler")["spec"]["endpoints"][0];
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    assert_eq!(endpoint["authorization"]["credentials"], serde_json::json!({"name": "muster-metrics", "key": "token"}));

    // The page alone can be turned off; nothing is mounted without a Secret.
    let off = template(&["--set", "metrics.ui=Off"]);
    let config = Config::parse(&scheduler_config(&off).1, "the rendered configuration").expect("valid");
    assert_eq!(
        (config.metrics_server.ui, config.metrics_server.bearer_token_file.as_str()),
        (muster::metrics::access::UiAccess::Off, "")
    );
    assert_eq!(
        the(&off, "Deployment", "muster-scheduler")["spec"]["template"]["spec"]["volumes"].as_array().unwrap().len(),
        1
    );

    let file = helm_home().join("config-with-metrics-server.yaml");
    std::fs::write(&file, "metricsServer:\n  ui: Off\n").expect("write the configuration");
    let refused = try_helm(&[
        "template",
        "muster",
        chart_ref(),
        "--set-file",
        &format!("scheduler.config={}", file.display()),
        "--set",
        "metrics.auth.secretName=muster-metrics",
    ]);
    assert!(refused.as_ref().is_err_and(|e| e.contains("set it in one place")), "{refused:?}");
    let refused = try_helm(&["template", "muster", chart_ref(), "--set", "metrics.ui=Closed"]);
    assert!(refused.as_ref().is_err_and(|e| e.contains("/metrics/ui")), "{refused:?}");
}

/// `helm uninstall` when dropped, so that a failing test does not leave the release behind.
struct Release {
    kubeconfig: String,
}

impl Drop for Release {
    fn drop(&mut self) {
        let uninstalled =
            try_helm(&["uninstall", "muster", "--namespace", "muster-system", "--kubeconfig", &self.kubeconfig]);
        if let Err(e) = uninstalled
            && !std::thread::panicking()
        {
            panic!("helm uninstall failed:\n{e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_brings_up_a_scheduler_that_binds_a_gang() {
    let cluster = TestCluster::new("helm").await;
    cluster.control_plane.start_controller_manager();
    scheduler::install_crds(&cluster).await;
    let kubeconfig = cluster.control_plane.kubeconfig.to_string_lossy().into_owned();
    let kubectl = |args: &[&str]| {
        cluster.control_plane.kubectl(args).unwrap_or_else(|e| panic!("kubectl {} failed:\n{e}", args.join(" ")))
    };
    // The chart installs what the manifests install: no other test may rely on those objects
    // while it does (it takes over any that are there), nor apply them.
    let _installed = INSTALLED.write().await;
    let _turn = MANIFESTS.lock().await;
    kubectl(&["apply", "-f", &repo().join("manifests/namespace.yaml").to_string_lossy()]);
    // Default values, but for what this shared control plane needs: the namespace (no
    // namespace controller runs, so a deleted namespace would stay Terminating for every
    // later test) and the CRDs (every other test uses them) stay after the uninstall;
    // companion mode leaves out the DeviceClass gpu.muster.dev, whose extendedResourceName
    // would change how other tests' nvidia.com/gpu pods are placed; and this test's own
    // scheduler name.
    let out = helm(&[
        "install",
        "muster",
        chart_ref(),
        "--namespace",
        "muster-system",
        "--kubeconfig",
        &kubeconfig,
        "--take-ownership",
        "--force-conflicts",
        "--set",
        "namespace.create=false,crds.keep=true,agent.mode=companion",
        "--set",
        &format!("scheduler.name={}", cluster.scheduler_name),
    ]);
    let release = Release { kubeconfig: kubeconfig.clone() };
    assert!(out.contains("STATUS: deployed"), "{out}");

    // Every object of the release is on the server, Helm's.
    let manifest =
        objects(&helm(&["get", "manifest", "muster", "--namespace", "muster-system", "--kubeconfig", &kubeconfig]));
    assert_eq!(manifest.len(), OBJECTS.len() - 2, "all but the Namespace and the DeviceClass: {:?}", manifest.keys());
    for object in manifest.values() {
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let group = api_version.rsplit_once('/').map(|(group, _)| group).unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or("").to_lowercase();
        let resource = if group.is_empty() { kind } else { format!("{kind}.{group}") };
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let mut args = vec!["get", resource.as_str(), name, "-o", "json"];
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            args.extend(["--namespace", namespace]);
        }
        let live: Value = serde_json::from_str(&kubectl(&args)).expect("kubectl's JSON");
        assert_eq!(live["metadata"]["annotations"]["meta.helm.sh/release-name"], "muster", "{resource} {name}");
        assert_eq!(live["metadata"]["labels"]["app.kubernetes.io/part-of"], "muster", "{resource} {name}");
    }

    // The configuration the chart installed, as the Deployment mounts it.
    let deployment: Value = serde_json::from_str(&kubectl(&[
        "get",
        "deployment",
        "muster-scheduler",
        "--namespace",
        "muster-system",
        "-o",
        "json",
    ]))
    .expect("the Deployment");
    let map =
        deployment["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"].as_str().expect("its ConfigMap");
    let text =
        kubectl(&["get", "configmap", map, "--namespace", "muster-system", "-o", "jsonpath={.data.config\\.yaml}"]);
    let installed = Config::parse(&text, "the installed configuration").expect("a valid configuration");
    assert_eq!(installed.scheduler_name, cluster.scheduler_name);
    assert!(installed.leader_election.enabled);

    // A gang of two pods of four GPUs each, on two nodes of four.
    for i in 0..2 {
        cluster
            .create_node(&builders::node(&cluster.name(&format!("n{i}")), 64, 512, 4, &[(TEST_LABEL, &cluster.id)]))
            .await;
    }
    let group = PodGroup::new("train", PodGroupSpec { min_member: 2, ..Default::default() });
    cluster.create(&cluster.api::<PodGroup>(), &group).await;
    let pods = cluster.api::<Pod>();
    for i in 0..2 {
        let pod =
            builders::pod(&format!("train-{i}"), &cluster.scheduler_name, 4, &[("muster.dev/pod-group", "train")]);
        cluster.create(&pods, &pod).await;
    }
    let _kubelet = KubeletEmulator::start(pods.clone());

    // The scheduler with the installed configuration, as the chart's service account alone,
    // on the chart's Lease; only its nodes are this test's, and its timings short.
    let mut config = installed;
    config.node_selector = [(TEST_LABEL.to_string(), cluster.id.clone())].into_iter().collect();
    config.backoff = scheduler::config(&cluster).backoff;
    config.leader_election.lease_duration_seconds = 4;
    config.leader_election.renew_deadline_seconds = 2;
    config.leader_election.retry_period_seconds = 1;
    config.request_timeout_seconds = 1;
    let metrics = Arc::new(Metrics::new());
    let options = Options { metrics: metrics.clone(), ..Default::default() };
    let client = scheduler_client(&cluster).await;
    let denied = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "muster-system")
        .list(&Default::default())
        .await;
    assert!(matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403), "it reads no Secrets: {denied:?}");
    let running = scheduler::start_client(client, config, options);
    let bound = wait_for_pods(&cluster, 60, "the gang bound by the chart's scheduler", |all| {
        all.len() == 2 && all.iter().all(|p| node_of(p).is_some())
    })
    .await;
    assert_ne!(node_of(&bound[0]), node_of(&bound[1]), "one pod per node");
    crate::support::wait::wait_for_group_running(&cluster, "train").await;
    assert_eq!(metrics.leader.get(), 1, "it held the chart's Lease");
    drop(running);

    // Uninstalled: the release's objects are gone, the CRDs and the namespace stay.
    drop(release);
    let gone = cluster.control_plane.kubectl(&["get", "clusterrole", "muster-scheduler"]);
    assert!(gone.as_ref().is_err_and(|e| e.contains("NotFound")), "{gone:?}");
    kubectl(&["get", "crd", "podgroups.muster.dev", "queues.muster.dev"]);
    kubectl(&["get", "namespace", "muster-system"]);
}
