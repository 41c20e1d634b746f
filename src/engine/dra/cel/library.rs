//! Kubernetes' CEL libraries for device selectors: the Quantity type (`quantity()`,
//! `isQuantity()`, `compareTo`, `add`, …) and the Semver type (`semver()`, `isSemver()`,
//! `major`, `compareTo`, …), with the same names and meanings as the API server's.

use std::any::Any;

use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use crate::engine::dra::semver::Semver;
use crate::quantity::Quantity;

pub static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");
pub static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

/// A quantity as a CEL value: what `device.capacity[...]` entries and `quantity()` give.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantityVal(pub Quantity);

impl Val for QuantityVal {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<QuantityVal>().is_some_and(|o| o.0 == self.0)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for QuantityVal {}

/// A semantic version as a CEL value: what `version` attributes and `semver()` give.
#[derive(Clone, Debug, PartialEq)]
pub struct SemverVal(pub Semver);

impl Val for SemverVal {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<SemverVal>().is_some_and(|o| o.0 == self.0)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for SemverVal {}

fn fail(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn order(o: std::cmp::Ordering) -> CelInt {
    CelInt::from(o as i64)
}

// The Quantity library.

fn quantity(text: &CelString<'_>) -> Result<QuantityVal, ExecutionError> {
    Quantity::parse(text.inner()).map(QuantityVal).map_err(|e| fail("quantity", e))
}

fn is_quantity(text: &CelString<'_>) -> CelBool {
    CelBool::from(Quantity::parse(text.inner()).is_ok())
}

fn sign(this: &QuantityVal) -> CelInt {
    CelInt::from(this.0.sign())
}

fn is_integer(this: &QuantityVal) -> CelBool {
    CelBool::from(this.0.as_integer().is_some())
}

fn as_integer(this: &QuantityVal) -> Result<CelInt, ExecutionError> {
    if !this.0.is_integer() {
        return Err(fail("asInteger", format!("cannot convert value to integer: {} is not an integer", this.0)));
    }
    this.0
        .as_integer()
        .map(CelInt::from)
        .ok_or_else(|| fail("asInteger", format!("cannot convert value to integer: {} overflows an int", this.0)))
}

fn as_approximate_float(this: &QuantityVal) -> CelDouble {
    CelDouble::from(this.0.as_f64())
}

fn quantity_add(this: &QuantityVal, other: &QuantityVal) -> Result<QuantityVal, ExecutionError> {
    this.0.checked_add(other.0).map(QuantityVal).ok_or_else(|| fail("add", "quantity overflow"))
}

fn quantity_add_int(this: &QuantityVal, other: &CelInt) -> Result<QuantityVal, ExecutionError> {
    quantity_add(this, &QuantityVal(Quantity::from_units(*other.inner())))
}

fn quantity_sub(this: &QuantityVal, other: &QuantityVal) -> Result<QuantityVal, ExecutionError> {
    this.0.checked_sub(other.0).map(QuantityVal).ok_or_else(|| fail("sub", "quantity overflow"))
}

fn quantity_sub_int(this: &QuantityVal, other: &CelInt) -> Result<QuantityVal, ExecutionError> {
    quantity_sub(this, &QuantityVal(Quantity::from_units(*other.inner())))
}

fn quantity_compare_to(this: &QuantityVal, other: &QuantityVal) -> CelInt {
    order(this.0.cmp(&other.0))
}

fn quantity_is_greater_than(this: &QuantityVal, other: &QuantityVal) -> CelBool {
    CelBool::from(this.0 > other.0)
}

fn quantity_is_less_than(this: &QuantityVal, other: &QuantityVal) -> CelBool {
    CelBool::from(this.0 < other.0)
}

// The Semver library.

fn semver(text: &CelString<'_>) -> Result<SemverVal, ExecutionError> {
    Semver::parse(text.inner()).map(SemverVal).map_err(|e| fail("semver", e))
}

fn semver_normalize(text: &CelString<'_>, normalize: &CelBool) -> Result<SemverVal, ExecutionError> {
    Semver::parse_with(text.inner(), *normalize.inner()).map(SemverVal).map_err(|e| fail("semver", e))
}

fn is_semver(text: &CelString<'_>) -> CelBool {
    CelBool::from(Semver::parse(text.inner()).is_ok())
}

fn is_semver_normalize(text: &CelString<'_>, normalize: &CelBool) -> CelBool {
    CelBool::from(Semver::parse_with(text.inner(), *normalize.inner()).is_ok())
}

fn major(this: &SemverVal) -> CelInt {
    CelInt::from(this.0.major as i64)
}

fn minor(this: &SemverVal) -> CelInt {
    CelInt::from(this.0.minor as i64)
}

fn patch(this: &SemverVal) -> CelInt {
    CelInt::from(this.0.patch as i64)
}

fn semver_compare_to(this: &SemverVal, other: &SemverVal) -> CelInt {
    order(this.0.cmp(&other.0))
}

fn semver_is_greater_than(this: &SemverVal, other: &SemverVal) -> CelBool {
    CelBool::from(this.0 > other.0)
}

fn semver_is_less_than(this: &SemverVal, other: &SemverVal) -> CelBool {
    CelBool::from(this.0 < other.0)
}

/// Registers both libraries on `env`.
pub fn kubernetes(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<QuantityVal>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    // Kubernetes declares `sign(q)`; `q.sign()` is accepted too.
    cel::add_overload!(env, fn sign: (QuantityVal) -> CelInt, id = "quantity_sign")?;
    cel::add_member_overload!(env, fn sign: (QuantityVal) -> CelInt)?;
    cel::add_member_overload!(env, fn is_integer: (QuantityVal) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (QuantityVal) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (QuantityVal) -> CelDouble)?;
    cel::add_member_overload!(env, fn quantity_add: (QuantityVal, QuantityVal) -> Result<QuantityVal>, name = "add")?;
    cel::add_member_overload!(env, fn quantity_add_int: (QuantityVal, CelInt) -> Result<QuantityVal>, name = "add")?;
    cel::add_member_overload!(env, fn quantity_sub: (QuantityVal, QuantityVal) -> Result<QuantityVal>, name = "sub")?;
    cel::add_member_overload!(env, fn quantity_sub_int: (QuantityVal, CelInt) -> Result<QuantityVal>, name = "sub")?;
    cel::add_member_overload!(env, fn quantity_compare_to: (QuantityVal, QuantityVal) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn quantity_is_greater_than: (QuantityVal, QuantityVal) -> CelBool,
        name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn quantity_is_less_than: (QuantityVal, QuantityVal) -> CelBool,
        name = "isLessThan")?;

    cel::add_overload!(env, fn semver: (CelString) -> Result<SemverVal>)?;
    cel::add_overload!(env, fn semver_normalize: (CelString, CelBool) -> Result<SemverVal>, name = "semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool)?;
    cel::add_overload!(env, fn is_semver_normalize: (CelString, CelBool) -> CelBool, name = "isSemver")?;
    cel::add_member_overload!(env, fn major: (SemverVal) -> CelInt)?;
    cel::add_member_overload!(env, fn minor: (SemverVal) -> CelInt)?;
    cel::add_member_overload!(env, fn patch: (SemverVal) -> CelInt)?;
    cel::add_member_overload!(env, fn semver_compare_to: (SemverVal, SemverVal) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn semver_is_greater_than: (SemverVal, SemverVal) -> CelBool,
        name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn semver_is_less_than: (SemverVal, SemverVal) -> CelBool,
        name = "isLessThan")?;
    env.add_type(QUANTITY_TYPE.to_owned())?;
    env.add_type(SEMVER_TYPE.to_owned())?;
    Ok(())
}
