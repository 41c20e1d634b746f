//! CDI spec files of prepared claims in the CDI folder: written whole or not at all, and
//! removed without complaint when already gone.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::cdi::Spec;

static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Writes `spec` to `dir/name`. Container runtimes watch the CDI folder and read every
/// `.json` file in it, so the spec is written under a hidden temporary name first and
/// renamed into place: a runtime never reads half a spec. The temporary name is unique per
/// write, so two preparations of one claim at once cannot mix their bytes.
pub async fn write(dir: &Path, name: &str, spec: &Spec) -> io::Result<PathBuf> {
    let bytes = serde_json::to_vec_pretty(spec).map_err(io::Error::other)?;
    let path = dir.join(name);
    let temporary =
        dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)));
    if let Err(error) = tokio::fs::write(&temporary, &bytes).await {
        let _ = tokio::fs::remove_file(&temporary).await;
        return Err(error);
    }
    if let Err(error) = tokio::fs::rename(&temporary, &path).await {
        let _ = tokio::fs::remove_file(&temporary).await;
        return Err(error);
    }
    Ok(path)
}

/// Removes `dir/name`; a file that is not there is already removed.
pub async fn remove(dir: &Path, name: &str) -> io::Result<()> {
    match tokio::fs::remove_file(dir.join(name)).await {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}
