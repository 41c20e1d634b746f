//! Running `muster simulate --output json` on a fixture of tests/sim and reading its pods
//! (for [`crate::simulate_device_quotas`] and [`crate::simulate_fractions`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sim").join(name)
}

/// The JSON report of `muster simulate` on `path`.
pub fn simulate(path: &Path) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(["simulate", "--output", "json", "--cluster", path.to_str().unwrap()])
        .output()
        .expect("muster runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

pub fn pod<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["pods"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no pod {name}"))
}
