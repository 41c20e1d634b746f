//! A device attribute's value, as a ResourceSlice publishes it and selectors compare it.
//!
//! Apart from the rest of the DRA model so that the CEL `device` value, which the model's
//! devices hold, can be built from attributes without importing the model.

use std::fmt;

use super::semver::Semver;

/// A device attribute's value (`int`, `bool`, `string` or `version`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttributeValue {
    Int(i64),
    Bool(bool),
    String(String),
    Version(Semver),
}

impl fmt::Display for AttributeValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::Int(i) => write!(f, "{i}"),
            AttributeValue::Bool(b) => write!(f, "{b}"),
            AttributeValue::String(s) => write!(f, "{s:?}"),
            AttributeValue::Version(v) => write!(f, "{v}"),
        }
    }
}
