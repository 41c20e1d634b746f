//! Semantic versions (semver.org 2.0.0), as Kubernetes' CEL semver library parses and
//! orders them: `major.minor.patch[-prerelease][+build]`, build metadata ignored in
//! comparisons, a pre-release ordered before its release.

use std::cmp::Ordering;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Identifier {
    Numeric(u64),
    Alphanumeric(String),
}

#[derive(Clone, Debug, Eq)]
pub struct Semver {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pre: Vec<Identifier>,
    build: Vec<String>,
}

/// Why a text is not a semantic version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid character(s) found in {0:?}")]
    InvalidCharacters(String),
    #[error("version segment {0:?} starts with 0")]
    LeadingZero(String),
    #[error("version segment {0:?} is too large")]
    TooLarge(String),
    #[error("{0:?} is not a semantic version: it needs major.minor.patch")]
    NotThreeParts(String),
    #[error("invalid pre-release identifier {id:?} in {text:?}")]
    PreRelease { id: String, text: String },
    #[error("pre-release identifier {0:?} starts with 0")]
    PreReleaseLeadingZero(String),
    #[error("{0:?} is too large")]
    PreReleaseTooLarge(String),
    #[error("invalid build metadata {id:?} in {text:?}")]
    Build { id: String, text: String },
}

fn numeric(part: &str, strict: bool) -> Result<u64, Error> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::InvalidCharacters(part.into()));
    }
    if strict && part.len() > 1 && part.starts_with('0') {
        return Err(Error::LeadingZero(part.into()));
    }
    part.parse().map_err(|_| Error::TooLarge(part.into()))
}

fn identifier_ok(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Semver {
    /// Parses a version strictly, as `semver()` does by default.
    pub fn parse(text: &str) -> Result<Semver, Error> {
        Semver::parse_with(text, false)
    }

    /// With `normalize`, as `semver(text, true)`: a leading `v` is dropped, a missing minor
    /// or patch is 0, and leading zeros are allowed.
    pub fn parse_with(text: &str, normalize: bool) -> Result<Semver, Error> {
        let mut rest = text;
        if normalize {
            rest = rest.strip_prefix('v').unwrap_or(rest);
        }
        let (rest, build) = match rest.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (rest, None),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let mut parts: Vec<&str> = core.split('.').collect();
        if normalize {
            while parts.len() < 3 {
                parts.push("0");
            }
        }
        if parts.len() != 3 {
            return Err(Error::NotThreeParts(text.into()));
        }
        let strict = !normalize;
        let major = numeric(parts[0], strict)?;
        let minor = numeric(parts[1], strict)?;
        let patch = numeric(parts[2], strict)?;
        let mut pre_ids = Vec::new();
        if let Some(pre) = pre {
            for id in pre.split('.') {
                if !identifier_ok(id) {
                    return Err(Error::PreRelease { id: id.into(), text: text.into() });
                }
                if id.bytes().all(|b| b.is_ascii_digit()) {
                    if id.len() > 1 && id.starts_with('0') {
                        return Err(Error::PreReleaseLeadingZero(id.into()));
                    }
                    pre_ids.push(Identifier::Numeric(id.parse().map_err(|_| Error::PreReleaseTooLarge(id.into()))?));
                } else {
                    pre_ids.push(Identifier::Alphanumeric(id.to_string()));
                }
            }
        }
        let mut build_ids = Vec::new();
        if let Some(build) = build {
            for id in build.split('.') {
                if !identifier_ok(id) {
                    return Err(Error::Build { id: id.into(), text: text.into() });
                }
                build_ids.push(id.to_string());
            }
        }
        Ok(Semver { major, minor, patch, pre: pre_ids, build: build_ids })
    }
}

impl PartialEq for Semver {
    fn eq(&self, other: &Semver) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

/// Build metadata is ignored, as in comparisons: versions that are equal hash alike.
impl std::hash::Hash for Semver {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.major, self.minor, self.patch, &self.pre).hash(state);
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Semver) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            (false, false) => {}
        }
        for (a, b) in self.pre.iter().zip(&other.pre) {
            let order = match (a, b) {
                (Identifier::Numeric(x), Identifier::Numeric(y)) => x.cmp(y),
                (Identifier::Numeric(_), Identifier::Alphanumeric(_)) => Ordering::Less,
                (Identifier::Alphanumeric(_), Identifier::Numeric(_)) => Ordering::Greater,
                (Identifier::Alphanumeric(x), Identifier::Alphanumeric(y)) => x.cmp(y),
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        self.pre.len().cmp(&other.pre.len())
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Semver) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, id) in self.pre.iter().enumerate() {
            f.write_str(if i == 0 { "-" } else { "." })?;
            match id {
                Identifier::Numeric(n) => write!(f, "{n}")?,
                Identifier::Alphanumeric(s) => f.write_str(s)?,
            }
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build.join("."))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Semver {
        Semver::parse(text).unwrap()
    }

    #[test]
    fn precedence_follows_semver_org() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.2.0",
            "1.10.0",
            "2.0.0",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(v("1.2.3+build.5"), v("1.2.3"), "build metadata is ignored");
        let set: std::collections::HashSet<Semver> = [v("1.2.3+build.5"), v("1.2.3")].into_iter().collect();
        assert_eq!(set.len(), 1, "equal versions hash alike");
        assert_eq!(v("580.95.5").major, 580);
    }

    #[test]
    fn strict_parsing_and_normalisation() {
        assert!(Semver::parse("v1.2.3").is_err());
        assert!(Semver::parse("1.2").is_err());
        assert!(Semver::parse("01.2.3").is_err());
        assert!(Semver::parse("1.2.3-").is_err());
        assert_eq!(Semver::parse_with("v1.2", true).unwrap().to_string(), "1.2.0");
        assert_eq!(Semver::parse_with("01.02.3", true).unwrap().to_string(), "1.2.3");
    }
}
