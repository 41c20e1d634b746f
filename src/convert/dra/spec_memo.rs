//! Claim specs converted once per claim and resourceVersion (a pending pod's claims are read
//! every cycle until it binds), and equal specs shared as one value, so that pods made from
//! one template share one shape in the engine.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

use super::Result;
use super::spec::claim_spec;
use crate::engine::dra::model::{ClaimKey, ClaimSpec};

/// Interns equal claim specs so that pods made from one template share one value (and one
/// shape in the engine).
pub type SpecInterner = crate::convert::interner::Interner<ClaimSpec>;

/// A claim's spec as last converted: (resourceVersion, spec, the snapshot that last used it).
type Kept = (String, Arc<ClaimSpec>, u64);

#[derive(Default)]
pub struct ClaimSpecs {
    interner: SpecInterner,
    /// By namespace, then name.
    by_claim: HashMap<String, HashMap<String, Kept>>,
    entries: usize,
    /// The snapshot being assembled, and how many entries it used.
    generation: u64,
    used: usize,
}

impl ClaimSpecs {
    /// A new snapshot starts.
    pub fn start(&mut self) {
        self.generation += 1;
        self.used = 0;
    }

    /// The spec of `claim` (named `key`): kept from an earlier snapshot while its
    /// resourceVersion is the same, else converted now. An error is not kept.
    pub fn of(&mut self, claim: &ResourceClaim, key: &ClaimKey) -> Result<Arc<ClaimSpec>> {
        let version = claim.metadata.resource_version.as_deref();
        if let Some(version) = version
            && let Some((seen, spec, used)) =
                self.by_claim.get_mut(&key.namespace).and_then(|names| names.get_mut(&key.name))
            && seen == version
        {
            if *used != self.generation {
                (*used, self.used) = (self.generation, self.used + 1);
            }
            return Ok(spec.clone());
        }
        let spec = match &claim.spec {
            Some(spec) => claim_spec(&format!("ResourceClaim {key}"), spec)?,
            None => ClaimSpec::default(),
        };
        let spec = self.interner.intern(spec);
        if let Some(version) = version {
            let entry = (version.to_string(), spec.clone(), self.generation);
            if self.by_claim.entry(key.namespace.clone()).or_default().insert(key.name.clone(), entry).is_none() {
                self.entries += 1;
            }
            self.used += 1;
        }
        Ok(spec)
    }

    /// After a snapshot: drops the specs of claims it did not read once they are most of
    /// the memo, then the interned values nothing holds.
    pub fn prune(&mut self) {
        if self.entries > 2 * self.used + 1024 {
            let generation = self.generation;
            for names in self.by_claim.values_mut() {
                names.retain(|_, (_, _, used)| *used == generation);
            }
            self.by_claim.retain(|_, names| !names.is_empty());
            self.entries = self.by_claim.values().map(HashMap::len).sum();
        }
        self.interner.prune();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, version: &str, class: &str) -> ResourceClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": version},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
        }))
        .unwrap()
    }

    #[test]
    fn a_claim_is_converted_once_per_version_and_equal_specs_are_one_value() {
        let mut specs = ClaimSpecs::default();
        specs.start();
        let key = |name: &str| ClaimKey { namespace: "ml".into(), name: name.into() };
        let a = specs.of(&claim("a", "1", "gpu"), &key("a")).unwrap();
        let b = specs.of(&claim("b", "1", "gpu"), &key("b")).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one template, one spec");
        assert!(Arc::ptr_eq(&a, &specs.of(&claim("a", "1", "gpu"), &key("a")).unwrap()));
        let changed = specs.of(&claim("a", "2", "big-gpu"), &key("a")).unwrap();
        assert_eq!(changed.requests[0].alternatives[0].class, "big-gpu", "a new version is read again");

        // Claims that come and go do not stay.
        for i in 0..5_000 {
            specs.start();
            specs.of(&claim(&format!("c{i}"), "1", &format!("class-{i}")), &key(&format!("c{i}"))).unwrap();
            specs.prune();
        }
        assert!(specs.entries <= 2 + 1024 + 1, "{} claims remembered", specs.entries);
    }
}
