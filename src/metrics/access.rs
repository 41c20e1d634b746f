//! Who may read the metrics port: an optional bearer token for `/metrics` and the page at
//! `/ui`, read from a file (a mounted Secret) at every request, so a rotated token takes
//! effect without a restart. `/healthz`, `/livez` and `/readyz` stay open: the kubelet's
//! probes carry no token.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The configuration's `metricsServer` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MetricsServer {
    /// A file holding the token that `/metrics` (and `/ui`, unless `ui: Open`) ask for as
    /// `Authorization: Bearer <token>`; empty: no token asked.
    pub bearer_token_file: String,
    pub ui: UiAccess,
}

/// Whether the read-only page is served at `/ui`, and behind the token or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UiAccess {
    /// Served, asking for the token when `bearerTokenFile` is set.
    #[default]
    Protected,
    /// Served to anyone who reaches the port, token or not.
    Open,
    /// Not served.
    Off,
}

impl MetricsServer {
    /// The token the file holds now, whitespace trimmed; None when no file is configured.
    pub fn token(&self) -> Option<Result<String, String>> {
        if self.bearer_token_file.is_empty() {
            return None;
        }
        let path = Path::new(&self.bearer_token_file);
        Some(match std::fs::read_to_string(path) {
            Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_string()),
            Ok(_) => Err(format!("metricsServer.bearerTokenFile {} is empty", path.display())),
            Err(e) => Err(format!("failed to read metricsServer.bearerTokenFile {}: {e}", path.display())),
        })
    }
}

/// What a request's `Authorization` header earns.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No token, or the wrong one.
    Refused,
    /// The token file cannot be read: nobody is let in, and the reason is logged.
    Broken(String),
}

/// Whether `authorization` (the header's value, if any) carries the configured token.
pub fn check(settings: &MetricsServer, authorization: Option<&[u8]>) -> Verdict {
    let Some(token) = settings.token() else { return Verdict::Allowed };
    let token = match token {
        Ok(token) => token,
        Err(why) => return Verdict::Broken(why),
    };
    let offered = authorization.and_then(|h| h.strip_prefix(b"Bearer ")).map(<[u8]>::trim_ascii);
    match offered {
        Some(offered) if same(offered, token.as_bytes()) => Verdict::Allowed,
        _ => Verdict::Refused,
    }
}

/// Compares in time that depends on the lengths only, not on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
