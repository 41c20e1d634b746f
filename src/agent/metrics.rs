//! Per-GPU metrics under dcgm-exporter's names and labels, so dashboards built for it keep
//! working, plus the agent's own health view.

use prometheus::{GaugeVec, IntGaugeVec, Opts, Registry};

use super::gpu::{Gpu, GpuSample, Severity};

const LABELS: &[&str] = &["gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id"];

/// The agent's registry and its gauges.
pub struct AgentMetrics {
    pub registry: Registry,
    utilization: GaugeVec,
    fb_used: GaugeVec,
    fb_free: GaugeVec,
    temperature: GaugeVec,
    power: GaugeVec,
    xid: GaugeVec,
    ecc_sbe: GaugeVec,
    ecc_dbe: GaugeVec,
    healthy: IntGaugeVec,
}

fn gauge(registry: &Registry, name: &str, help: &str) -> GaugeVec {
    let gauge = GaugeVec::new(Opts::new(name, help), LABELS).expect("valid metric");
    registry.register(Box::new(gauge.clone())).expect("metric registered once");
    gauge
}

impl AgentMetrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let healthy = IntGaugeVec::new(
            Opts::new("muster_agent_gpu_healthy", "1 when the GPU is in service, 0 when it is tainted out of it"),
            LABELS,
        )
        .expect("valid metric");
        registry.register(Box::new(healthy.clone())).expect("metric registered once");
        AgentMetrics {
            utilization: gauge(&registry, "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
            fb_used: gauge(&registry, "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
            fb_free: gauge(&registry, "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
            temperature: gauge(&registry, "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
            power: gauge(&registry, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
            xid: gauge(&registry, "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
            ecc_sbe: gauge(
                &registry,
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                "Total number of single-bit volatile ECC errors.",
            ),
            ecc_dbe: gauge(
                &registry,
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "Total number of double-bit volatile ECC errors.",
            ),
            healthy,
            registry,
        }
    }

    /// Sets every gauge from one reading; GPUs that are gone lose their series.
    pub fn update(&self, hostname: &str, gpus: &[Gpu], samples: &[GpuSample]) {
        for family in self.gauges() {
            family.reset();
        }
        self.healthy.reset();
        for (index, gpu) in gpus.iter().enumerate() {
            let minor = gpu.minor.to_string();
            let device = format!("nvidia{minor}");
            let labels = [minor.as_str(), &gpu.uuid, &device, &gpu.product_name, hostname, &gpu.pci_bus_id];
            let in_service = gpu.health.severity() != Severity::Failing;
            self.healthy.with_label_values(&labels).set(i64::from(in_service));
            let Some(sample) = samples.get(index) else { continue };
            let mib = |bytes: u64| (bytes >> 20) as f64;
            let values = [
                (&self.utilization, sample.utilization_percent),
                (&self.fb_used, sample.memory_used_bytes.map(mib)),
                (&self.fb_free, sample.memory_free_bytes.map(mib)),
                (&self.temperature, sample.temperature_celsius),
                (&self.power, sample.power_watts),
                (&self.xid, Some(sample.last_xid as f64)),
                (&self.ecc_sbe, sample.ecc_corrected.map(|n| n as f64)),
                (&self.ecc_dbe, sample.ecc_uncorrected.map(|n| n as f64)),
            ];
            for (family, value) in values {
                if let Some(value) = value {
                    family.with_label_values(&labels).set(value);
                }
            }
        }
    }

    fn gauges(&self) -> [&GaugeVec; 8] {
        [
            &self.utilization,
            &self.fb_used,
            &self.fb_free,
            &self.temperature,
            &self.power,
            &self.xid,
            &self.ecc_sbe,
            &self.ecc_dbe,
        ]
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}
