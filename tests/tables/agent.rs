//! The node agent without a cluster: NVML readings through the DeviceSource trait into
//! published devices (full GPUs and MIG), slices and their writes, health taints, companion
//! rules, node labels and the inventory file.

use muster::agent::companion;
use muster::agent::gpu::{Gpu, GpuSample, Health};
use muster::agent::inventory::{self, FakeSource};
use muster::agent::labels;
use muster::agent::nvml::{NvmlMigReading, NvmlReader, NvmlReading, NvmlSource, kernel_bus_id, mig_profile};
use muster::agent::slices::{self, Publication};
use muster::agent::source::{DeviceSource, Result as SourceResult};
use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::enums::device::DeviceArchitecture;

/// Readings recorded from NVML, played back.
struct Recorded(Vec<NvmlReading>);

impl NvmlReader for Recorded {
    fn read(&mut self) -> SourceResult<Vec<NvmlReading>> {
        Ok(self.0.clone())
    }
}

fn h100(minor: u32) -> NvmlReading {
    NvmlReading {
        minor,
        uuid: format!("GPU-1d5e0c3a-8f1b-4c2e-9a7d-00000000000{minor}"),
        name: "NVIDIA H100 80GB HBM3".into(),
        brand: Brand::Nvidia,
        architecture: DeviceArchitecture::Hopper,
        compute_capability: (9, 0),
        driver_version: "580.95.05".into(),
        cuda_driver_version: 13000,
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x1B + minor),
        pcie_root: "pci0000:1a".into(),
        memory_total_bytes: 85_520_809_984,
        mig: Vec::new(),
        lost: false,
        last_xid: None,
        ecc_uncorrected: Some(0),
        sample: GpuSample { utilization_percent: Some(42.0), ..Default::default() },
    }
}

fn publication(sharing: bool) -> Publication {
    Publication {
        driver_name: "gpu.muster.dev".into(),
        node_name: "node-a".into(),
        node_uid: Some("uid-1".into()),
        sharing,
    }
}

fn attr<'a>(
    device: &'a k8s_openapi::api::resource::v1::Device,
    name: &str,
) -> &'a k8s_openapi::api::resource::v1::DeviceAttribute {
    device
        .attributes
        .as_ref()
        .unwrap()
        .get(name)
        .unwrap_or_else(|| panic!("device {} has no attribute {name}", device.name))
}

#[test]
fn a_full_gpu_is_published_with_nvidias_attribute_names_and_types() {
    let mut source = NvmlSource::new(Recorded(vec![h100(1), h100(0)]));
    let gpus = source.read().unwrap();
    assert_eq!(gpus.iter().map(|g| g.minor).collect::<Vec<_>>(), [0, 1], "sorted by minor number");
    assert_eq!(source.samples()[0].utilization_percent, Some(42.0));
    let devices = slices::devices(&gpus, &publication(false));
    let gpu0 = &devices[0];
    assert_eq!(gpu0.name, "gpu-0");
    assert_eq!(attr(gpu0, "type").string.as_deref(), Some("gpu"));
    assert_eq!(attr(gpu0, "uuid").string.as_deref(), Some("GPU-1d5e0c3a-8f1b-4c2e-9a7d-000000000000"));
    assert_eq!(attr(gpu0, "productName").string.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(attr(gpu0, "brand").string.as_deref(), Some("Nvidia"));
    assert_eq!(attr(gpu0, "architecture").string.as_deref(), Some("Hopper"));
    assert_eq!(attr(gpu0, "index").int, Some(0));
    // Versions are semver: leading zeros dropped, missing parts filled.
    assert_eq!(attr(gpu0, "driverVersion").version.as_deref(), Some("580.95.5"));
    assert_eq!(attr(gpu0, "cudaDriverVersion").version.as_deref(), Some("13.0.0"));
    assert_eq!(attr(gpu0, "cudaComputeCapability").version.as_deref(), Some("9.0.0"));
    // NVML's 8-digit upper-case bus ID in the kernel's form.
    assert_eq!(attr(gpu0, "resource.kubernetes.io/pciBusID").string.as_deref(), Some("0000:1b:00.0"));
    assert_eq!(attr(gpu0, "resource.kubernetes.io/pcieRoot").string.as_deref(), Some("pci0000:1a"));
    let memory = &gpu0.capacity.as_ref().unwrap()["memory"];
    assert_eq!(memory.value.0, "81559Mi", "memory in bytes, in the form the API server stores it");
    assert!(memory.request_policy.is_none() && gpu0.allow_multiple_allocations.is_none());
    assert!(gpu0.taints.is_none(), "a healthy GPU has no taint");
}

#[test]
fn a_gpu_in_mig_mode_is_published_as_its_mig_devices() {
    let mut reading = h100(3);
    reading.mig = vec![
        NvmlMigReading {
            uuid: "MIG-aaaa".into(),
            index: 0,
            memory_total_bytes: 10_468_982_784,
            multiprocessors: 16,
            gpu_instance_slices: 1,
        },
        NvmlMigReading {
            uuid: "MIG-bbbb".into(),
            index: 1,
            memory_total_bytes: 42_949_672_960,
            multiprocessors: 60,
            gpu_instance_slices: 4,
        },
    ];
    let gpus = NvmlSource::new(Recorded(vec![reading])).read().unwrap();
    assert_eq!(gpus[0].mig[0].profile, "1g.10gb");
    assert_eq!(gpus[0].mig[1].profile, "4g.40gb");
    let devices = slices::devices(&gpus, &publication(false));
    assert_eq!(devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["gpu-3-mig-0-0", "gpu-3-mig-1-0"]);
    let mig = &devices[1];
    assert_eq!(attr(mig, "type").string.as_deref(), Some("mig"));
    assert_eq!(attr(mig, "uuid").string.as_deref(), Some("MIG-bbbb"));
    assert_eq!(attr(mig, "parentUUID").string.as_deref(), Some(gpus[0].uuid.as_str()));
    assert_eq!(attr(mig, "profile").string.as_deref(), Some("4g.40gb"));
    let capacity = mig.capacity.as_ref().unwrap();
    assert_eq!(capacity["memory"].value.0, "40Gi");
    assert_eq!(capacity["multiprocessors"].value.0, "60");
}

#[test]
fn nvml_health_becomes_a_taint_on_the_device() {
    let mut lost = h100(0);
    lost.lost = true;
    let mut xid = h100(1);
    xid.last_xid = Some(79);
    let mut app_fault = h100(2);
    app_fault.last_xid = Some(13);
    let mut ecc = h100(3);
    ecc.ecc_uncorrected = Some(2);
    let gpus = NvmlSource::new(Recorded(vec![lost, xid, app_fault, ecc, h100(4)])).read().unwrap();
    assert_eq!(gpus[0].health, Health::Lost);
    let devices = slices::devices(&gpus, &publication(false));
    let taint = |i: usize| {
        devices[i].taints.as_ref().map(|t| (t[0].key.clone(), t[0].value.clone().unwrap(), t[0].effect.clone()))
    };
    assert_eq!(taint(0), Some(("gpu.muster.dev/gpu-lost".into(), "true".into(), "NoSchedule".into())));
    assert_eq!(taint(1), Some(("gpu.muster.dev/xid".into(), "79".into(), "NoSchedule".into())));
    assert_eq!(
        taint(2),
        Some(("gpu.muster.dev/xid".into(), "13".into(), "None".into())),
        "an application's XID only informs"
    );
    assert_eq!(taint(3), Some(("gpu.muster.dev/ecc".into(), "2".into(), "NoSchedule".into())));
    assert_eq!(taint(4), None);
}

#[test]
fn sharing_publishes_consumable_memory() {
    let gpus = NvmlSource::new(Recorded(vec![h100(0)])).read().unwrap();
    let devices = slices::devices(&gpus, &publication(true));
    assert_eq!(devices[0].allow_multiple_allocations, Some(true));
    let policy = devices[0].capacity.as_ref().unwrap()["memory"].request_policy.clone().unwrap();
    assert_eq!(policy.default.unwrap().0, "79Gi", "a claim that asks for no memory takes all that can be shared");
    let range = policy.valid_range.unwrap();
    // The API wants the maximum and the default to be multiples of the step.
    assert_eq!(
        (range.min.0.as_str(), range.step.unwrap().0.as_str(), range.max.unwrap().0.as_str()),
        ("1Gi", "1Gi", "79Gi")
    );
}

fn fake_gpus(count: u32) -> Vec<Gpu> {
    FakeSource::new("node-a", count, "NVIDIA H100 80GB HBM3").read().unwrap()
}

#[test]
fn slices_split_at_the_api_limit_and_the_lower_one_with_taints() {
    let publication = publication(false);
    let slices = slices::desired(slices::devices(&fake_gpus(300), &publication), &publication, 4);
    assert_eq!(slices.iter().map(|s| s.spec.devices.as_ref().unwrap().len()).collect::<Vec<_>>(), [128, 128, 44]);
    for slice in &slices {
        assert_eq!(slice.spec.pool.name, "node-a");
        assert_eq!((slice.spec.pool.generation, slice.spec.pool.resource_slice_count), (4, 3));
        assert_eq!(slice.spec.node_name.as_deref(), Some("node-a"));
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Node", "node-a", "uid-1"));
    }
    let mut gpus = fake_gpus(100);
    gpus[7].health = Health::Xid { code: 48 };
    let slices = slices::desired(slices::devices(&gpus, &publication), &publication, 1);
    assert_eq!(slices.iter().map(|s| s.spec.devices.as_ref().unwrap().len()).collect::<Vec<_>>(), [64, 36]);
    let names: std::collections::BTreeSet<_> = slices.iter().map(|s| s.metadata.name.clone().unwrap()).collect();
    assert_eq!(names.len(), 2, "slice names are distinct");
}

#[test]
fn nothing_is_written_when_nothing_changed_and_every_slice_moves_to_the_next_generation_otherwise() {
    let publication = publication(false);
    let gpus = fake_gpus(8);
    let first = slices::plan(&[], slices::devices(&gpus, &publication), &publication);
    assert_eq!((first.create.len(), first.replace.len(), first.delete.len()), (1, 0, 0));
    assert_eq!(first.create[0].spec.pool.generation, 1);
    // As the API server stores it: a resourceVersion, and taint times filled in.
    let mut published = first.create.clone();
    published[0].metadata.resource_version = Some("17".into());
    assert!(slices::plan(&published, slices::devices(&gpus, &publication), &publication).is_empty());

    let mut failing = gpus.clone();
    failing[2].health = Health::Lost;
    let next = slices::plan(&published, slices::devices(&failing, &publication), &publication);
    assert_eq!((next.create.len(), next.replace.len(), next.delete.len()), (0, 1, 0));
    assert_eq!(next.replace[0].spec.pool.generation, 2, "a change raises the pool generation");
    assert_eq!(
        next.replace[0].metadata.resource_version.as_deref(),
        Some("17"),
        "replaced with optimistic concurrency"
    );

    let mut tainted = next.replace.clone();
    for device in tainted[0].spec.devices.iter_mut().flatten() {
        for taint in device.taints.iter_mut().flatten() {
            taint.time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
        }
    }
    assert!(
        slices::plan(&tainted, slices::devices(&failing, &publication), &publication).is_empty(),
        "the time the API server gives a taint is no change"
    );

    // Growing past one slice creates the second; shrinking deletes it.
    let grown = slices::plan(&published, slices::devices(&fake_gpus(130), &publication), &publication);
    assert_eq!((grown.create.len(), grown.replace.len()), (1, 1));
    let mut two = grown.replace.clone();
    two.extend(grown.create.clone());
    let shrunk = slices::plan(&two, slices::devices(&gpus, &publication), &publication);
    assert_eq!(shrunk.delete, vec![slices::slice_name(&publication, 1)]);
    assert_eq!(shrunk.replace[0].spec.pool.generation, 3);
}

#[test]
fn companion_rules_aim_at_the_other_drivers_device_by_uuid() {
    let mut gpus = fake_gpus(4);
    gpus[1].health = Health::Xid { code: 79 };
    gpus[2].health = Health::Xid { code: 43 };
    let mut theirs: k8s_openapi::api::resource::v1::ResourceSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-a-gpu.nvidia.com-x"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-a", "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                 "devices": []}
    }))
    .unwrap();
    // NVIDIA's driver numbers devices its own way; only the UUID ties them to our GPUs.
    theirs.spec.devices = Some(
        gpus.iter()
            .rev()
            .enumerate()
            .map(|(i, g)| {
                serde_json::from_value(serde_json::json!({
                    "name": format!("gpu-{i}"),
                    "attributes": {"uuid": {"string": g.uuid}, "type": {"string": "gpu"}}
                }))
                .unwrap()
            })
            .collect(),
    );
    assert!(companion::publishes_for(std::slice::from_ref(&theirs), "gpu.nvidia.com", "node-a"));
    assert!(!companion::publishes_for(std::slice::from_ref(&theirs), "gpu.nvidia.com", "node-b"));
    let rules = companion::rules(&gpus, &[theirs], "gpu.nvidia.com", &publication(false), "gpu.muster.dev");
    let summary: Vec<_> = rules
        .iter()
        .map(|r| {
            let s = r.spec.device_selector.clone().unwrap();
            (s.device.unwrap(), r.spec.taint.key.clone(), r.spec.taint.effect.clone())
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("gpu-1".into(), "gpu.muster.dev/xid".into(), "None".into()),
            ("gpu-2".into(), "gpu.muster.dev/xid".into(), "NoSchedule".into())
        ]
    );
    assert_eq!(rules[1].metadata.name.as_deref(), Some("muster-node-a-gpu-2"));
    let owner = &rules[1].metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "uid-1"), "rules go with their Node");
    // Recovery deletes the rule; an unchanged rule is left alone.
    let plan = companion::plan(&rules, vec![rules[1].clone()]);
    assert_eq!((plan.create.len(), plan.replace.len(), plan.delete), (0, 0, vec!["muster-node-a-gpu-1".to_string()]));
}

#[test]
fn node_labels_follow_gpu_feature_discovery() {
    let labels = labels::node_labels(&fake_gpus(8));
    let get = |k: &str| labels[k].clone().unwrap();
    assert_eq!(get("nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
    assert_eq!(get("nvidia.com/gpu.memory"), "81920");
    assert_eq!(get("nvidia.com/gpu.count"), "8");
    assert_eq!(get("nvidia.com/gpu.family"), "hopper");
    assert_eq!((get("nvidia.com/gpu.compute.major"), get("nvidia.com/gpu.compute.minor")), ("9".into(), "0".into()));
    assert!(labels::node_labels(&[]).values().all(Option::is_none), "a node without GPUs loses the labels");
    assert_eq!(labels::label_value("NVIDIA A100-SXM4-40GB (MIG)"), "NVIDIA-A100-SXM4-40GB-MIG");
}

#[test]
fn the_inventory_file_names_its_problems() {
    let ok = "gpus:\n- minor: 1\n  uuid: GPU-b\n  productName: NVIDIA A100-SXM4-80GB\n  memoryBytes: 85899345920\n  health: {state: xid, code: 79}\n- minor: 0\n  uuid: GPU-a\n  productName: NVIDIA A100-SXM4-80GB\n  memoryBytes: 85899345920\n";
    let gpus = inventory::parse(ok, "inv.yaml").unwrap();
    assert_eq!(gpus[0].uuid, "GPU-a");
    assert_eq!(gpus[1].health, Health::Xid { code: 79 });
    let twice = "gpus:\n- {minor: 0, uuid: GPU-a, productName: x, memoryBytes: 1}\n- {minor: 0, uuid: GPU-b, productName: x, memoryBytes: 1}\n";
    let e = inventory::parse(twice, "inv.yaml").unwrap_err().to_string();
    assert!(e.contains("inv.yaml") && e.contains("minor number 0"), "{e}");
    let unknown = "gpus:\n- {minor: 0, uuid: GPU-a, productName: x, memoryBytes: 1, colour: green}\n";
    let e = inventory::parse(unknown, "inv.yaml").unwrap_err().to_string();
    assert!(e.contains("inv.yaml") && e.contains("colour"), "{e}");
}

#[test]
fn an_applications_xid_never_hides_a_critical_one() {
    let mut xids = std::collections::HashMap::new();
    muster::agent::nvml::record_xid(&mut xids, "GPU-a".into(), 79);
    muster::agent::nvml::record_xid(&mut xids, "GPU-a".into(), 13);
    assert_eq!(xids["GPU-a"], 79);
    muster::agent::nvml::record_xid(&mut xids, "GPU-a".into(), 48);
    assert_eq!(xids["GPU-a"], 48, "a later critical XID replaces an earlier one");
    muster::agent::nvml::record_xid(&mut xids, "GPU-b".into(), 43);
    muster::agent::nvml::record_xid(&mut xids, "GPU-b".into(), 79);
    assert_eq!(xids["GPU-b"], 79);
}

#[test]
fn bus_ids_and_mig_profiles_read_as_nvidia_smi_prints_them() {
    assert_eq!(kernel_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
    assert_eq!(kernel_bus_id("0000:3b:00.0"), "0000:3b:00.0");
    assert_eq!(mig_profile(1, 9_856 << 20), "1g.10gb");
    assert_eq!(mig_profile(7, 81_408 << 20), "7g.80gb");
    assert_eq!(mig_profile(7, 40_192 << 20), "7g.40gb", "A100 40GB's full-GPU profile");
    assert_eq!(mig_profile(1, 4_864 << 20), "1g.5gb");
    assert_eq!(slices::semver("580.95.05").as_deref(), Some("580.95.5"));
    assert_eq!(slices::semver("12.4").as_deref(), Some("12.4.0"));
    assert_eq!(slices::semver("r580"), None);
}

fn muster(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_muster")).args(args).output().expect("run muster")
}

#[test]
fn dry_run_prints_the_slices_driver_mode_would_publish() {
    let out = muster(&["agent", "--dry-run", "--node-name", "gpu-node-1", "--fake-gpus", "2", "--sharing"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let slices: Vec<k8s_openapi::api::resource::v1::ResourceSlice> = yaml_serde::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("each document is a ResourceSlice"))
        .collect();
    assert_eq!(slices.len(), 1);
    assert!(text.contains("apiVersion: resource.k8s.io/v1") && text.contains("kind: ResourceSlice"), "{text}");
    let spec = &slices[0].spec;
    assert_eq!((spec.driver.as_str(), spec.pool.name.as_str()), ("gpu.muster.dev", "gpu-node-1"));
    let devices = spec.devices.as_ref().unwrap();
    assert_eq!(devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["gpu-0", "gpu-1"]);
    assert_eq!(devices[0].allow_multiple_allocations, Some(true));
    assert_eq!(attr(&devices[0], "productName").string.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    // YAML 1.1 readers (PyYAML, Ansible) would read the bus ID plain as the number 1080.0.
    assert_eq!(attr(&devices[0], "resource.kubernetes.io/pciBusID").string.as_deref(), Some("0000:18:00.0"));
    assert!(text.contains("string: '0000:18:00.0'"), "{text}");
}

#[test]
fn without_nvml_the_agent_says_what_to_do() {
    let out = muster(&["agent", "--dry-run", "--node-name", "n", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("failed to load NVML"), "{stderr}");
    assert!(stderr.contains("--inventory FILE or --fake-gpus N"), "{stderr}");
    let out = muster(&["agent", "--dry-run", "--fake-gpus", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--node-name"), "a missing node name is named");
}

#[test]
fn metrics_use_dcgm_exporters_names_and_labels() {
    let metrics = muster::agent::metrics::AgentMetrics::new();
    let mut gpus = fake_gpus(2);
    gpus[1].health = Health::Lost;
    let sample = GpuSample {
        utilization_percent: Some(87.0),
        memory_used_bytes: Some(40 << 30),
        memory_free_bytes: Some(40 << 30),
        temperature_celsius: Some(61.0),
        power_watts: Some(512.5),
        last_xid: 0,
        ecc_corrected: Some(3),
        ecc_uncorrected: Some(0),
    };
    metrics.update("node-a", &gpus, &[sample, GpuSample { last_xid: 79, ..Default::default() }]);
    let text = prometheus::TextEncoder::new().encode_to_string(&metrics.registry.gather()).unwrap();
    let labels = format!(
        "Hostname=\"node-a\",UUID=\"{}\",device=\"nvidia0\",gpu=\"0\",modelName=\"NVIDIA H100 80GB HBM3\",pci_bus_id=\"{}\"",
        gpus[0].uuid, gpus[0].pci_bus_id
    );
    for line in [
        format!("DCGM_FI_DEV_GPU_UTIL{{{labels}}} 87"),
        format!("DCGM_FI_DEV_FB_USED{{{labels}}} 40960"),
        format!("DCGM_FI_DEV_FB_FREE{{{labels}}} 40960"),
        format!("DCGM_FI_DEV_GPU_TEMP{{{labels}}} 61"),
        format!("DCGM_FI_DEV_POWER_USAGE{{{labels}}} 512.5"),
        format!("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{labels}}} 3"),
        format!("muster_agent_gpu_healthy{{{labels}}} 1"),
    ] {
        assert!(text.contains(&line), "missing {line} in\n{text}");
    }
    assert!(text.contains(&format!("DCGM_FI_DEV_XID_ERRORS{{Hostname=\"node-a\",UUID=\"{}\"", gpus[1].uuid)));
    // The second GPU has no temperature reading: its series is absent, not zero.
    assert_eq!(text.matches("DCGM_FI_DEV_GPU_TEMP{").count(), 1, "{text}");
    let unhealthy = format!("muster_agent_gpu_healthy{{Hostname=\"node-a\",UUID=\"{}\"", gpus[1].uuid);
    assert!(text.lines().any(|l| l.starts_with(&unhealthy) && l.ends_with(" 0")), "{text}");
}
