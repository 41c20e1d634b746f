//! Alibaba's openb GPU-sharing trace as published: the GPU nodes
//! (`openb_node_list_gpu_node.csv`) and one pod list (`openb_pod_list_<workload>.csv`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
pub struct OpenbNode {
    pub sn: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpu: u32,
    pub model: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct OpenbPod {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub num_gpu: u32,
    /// Thousandths of each GPU (1000 for whole GPUs).
    pub gpu_milli: u32,
    /// GPU models allowed, `|`-separated; empty: any.
    #[serde(default)]
    pub gpu_spec: String,
}

impl OpenbPod {
    /// Thousandths of a GPU the pod asks for in all.
    pub fn gpu_request(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    pub fn models(&self) -> Vec<String> {
        self.gpu_spec.split('|').map(str::trim).filter(|m| !m.is_empty()).map(String::from).collect()
    }
}

/// Where the trace's files are: the folder holding them, or a folder with a `csv` folder
/// inside (as the trace is published).
fn folder(dir: &Path) -> PathBuf {
    let inner = dir.join("csv");
    if inner.join("openb_node_list_gpu_node.csv").is_file() { inner } else { dir.to_path_buf() }
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, String> {
    let mut reader = csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (i, row) in reader.deserialize().enumerate() {
        rows.push(row.map_err(|e| format!("{}, line {}: {e}", path.display(), i + 2))?);
    }
    Ok(rows)
}

/// The GPU nodes and the pods of `workload` (`default`, `gpushare40`, ...).
pub fn load(dir: &Path, workload: &str) -> Result<(Vec<OpenbNode>, Vec<OpenbPod>), String> {
    let dir = folder(dir);
    let nodes: Vec<OpenbNode> = read(&dir.join("openb_node_list_gpu_node.csv"))?;
    let pods: Vec<OpenbPod> = read(&dir.join(format!("openb_pod_list_{workload}.csv")))?;
    if nodes.is_empty() || pods.is_empty() {
        return Err(format!("{}: no nodes or no pods", dir.display()));
    }
    for pod in &pods {
        if pod.num_gpu > 0 && !(1..=1000).contains(&pod.gpu_milli) {
            return Err(format!("pod {}: gpu_milli {} is not between 1 and 1000", pod.name, pod.gpu_milli));
        }
        if pod.num_gpu > 1 && pod.gpu_milli != 1000 {
            return Err(format!(
                "pod {}: {} GPUs of {} thousandths each; several GPUs are whole",
                pod.name, pod.num_gpu, pod.gpu_milli
            ));
        }
    }
    Ok((nodes, pods))
}

/// The published results beside the trace (`published_results/`), when they are there.
pub fn published_folder(dir: &Path) -> Option<PathBuf> {
    [dir.join("published_results"), dir.join("..").join("published_results")].into_iter().find(|p| p.is_dir())
}
