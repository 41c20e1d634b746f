//! Claim specs with their selectors resolved: each request's alternatives with the compiled
//! selectors of their class and their own, or why an alternative cannot be used at all.

use std::sync::Arc;

use super::model::{ClaimSpec, DraSnapshot};
use super::selectors::{SelectorCache, SelectorId};

/// A claim spec with its selectors resolved to compiled ids: per request, per alternative,
/// the class's selectors then the request's, or why the alternative cannot be used at all.
#[derive(Debug)]
pub struct ResolvedSpec {
    pub spec: Arc<ClaimSpec>,
    pub selectors: Vec<Vec<AlternativeSelectors>>,
}

/// One alternative's compiled selectors with where each comes from, or why the alternative
/// cannot be used at all.
pub type AlternativeSelectors = Result<Vec<(SelectorId, SelectorOrigin)>, UnusableAlternative>;

/// Why an alternative of a request cannot be used on any node: its class is missing, or one
/// of its selectors does not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnusableAlternative {
    /// The DeviceClass it names.
    #[error("device class {0} does not exist")]
    NoClass(String),
    /// A selector of its class or its own, with the class and why it does not compile.
    #[error("{}: {error}", origin_text(*.origin, .class))]
    Selector { origin: SelectorOrigin, class: String, error: Arc<str> },
}

/// Where a selector comes from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectorOrigin {
    Class(usize),
    Request(usize),
}

impl ResolvedSpec {
    /// Resolves `spec` against the snapshot's classes, compiling its selectors once.
    pub fn resolve(spec: &Arc<ClaimSpec>, dra: &DraSnapshot, cache: &mut SelectorCache) -> ResolvedSpec {
        let selectors = spec
            .requests
            .iter()
            .map(|request| {
                request
                    .alternatives
                    .iter()
                    .map(|sub| {
                        let class = dra
                            .classes
                            .get(&sub.class)
                            .ok_or_else(|| UnusableAlternative::NoClass(sub.class.clone()))?;
                        let mut ids = Vec::with_capacity(class.selectors.len() + sub.selectors.len());
                        for (i, e) in class.selectors.iter().enumerate() {
                            ids.push((cache.id(e), SelectorOrigin::Class(i)));
                        }
                        for (i, e) in sub.selectors.iter().enumerate() {
                            ids.push((cache.id(e), SelectorOrigin::Request(i)));
                        }
                        for &(id, origin) in &ids {
                            if let Some(error) = cache.compile_error(id) {
                                return Err(UnusableAlternative::Selector {
                                    origin,
                                    class: sub.class.clone(),
                                    error: error.clone(),
                                });
                            }
                        }
                        Ok(ids)
                    })
                    .collect()
            })
            .collect();
        ResolvedSpec { spec: spec.clone(), selectors }
    }

    /// The first problem that makes an alternative unusable everywhere, when no
    /// alternative of some request is usable.
    pub fn unusable(&self) -> Option<String> {
        for (r, alternatives) in self.selectors.iter().enumerate() {
            if alternatives.iter().all(Result::is_err) {
                let why =
                    alternatives.iter().find_map(|a| a.as_ref().err()).map(ToString::to_string).unwrap_or_default();
                return Some(format!("request {}: {why}", self.spec.requests[r].name));
            }
        }
        None
    }
}

/// Where a selector comes from, in words, for error messages.
pub(crate) fn origin_text(origin: SelectorOrigin, class: &str) -> String {
    match origin {
        SelectorOrigin::Class(i) => format!("class {class} selector #{i}"),
        SelectorOrigin::Request(i) => format!("selector #{i}"),
    }
}
