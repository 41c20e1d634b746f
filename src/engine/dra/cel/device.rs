//! The `device` variable of a selector: `driver`, `attributes` and `capacity` (maps keyed
//! by domain, then by name; a short name is filed under the driver's own domain),
//! `allowMultipleAllocations`. Indexing an unknown domain gives an empty map, so
//! `device.attributes["other.com"].x` is a "no such key" error, and `has()` is false.
//!
//! Built once per device, when the device is converted, and borrowed by every evaluation.

use std::collections::HashMap;

use cel::ExecutionError;
use cel::common::traits::{Container, Indexer, Iterable, Iterator as CelIterator, Sizer};
use cel::common::types::{CelBool, CelInt, CelMap, CelMapKey, CelString, MAP_TYPE, Type};
use cel::common::value::{CowVal, Val};

use super::library::{QuantityVal, SemverVal};
use crate::engine::dra::attribute::AttributeValue;
use crate::quantity::Quantity;

static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

/// Maps of maps, by domain; a domain the device has nothing in is an empty map.
#[derive(Clone, Debug)]
pub struct DomainMap {
    domains: HashMap<String, CelMap<'static>>,
    /// Keys of `domains`, as CEL strings, for iteration.
    keys: Vec<CelString<'static>>,
    empty: CelMap<'static>,
}

impl DomainMap {
    fn new<V>(driver: &str, entries: impl IntoIterator<Item = (String, V)>, value: impl Fn(V) -> Box<dyn Val>) -> Self {
        let mut grouped: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> = HashMap::new();
        for (name, v) in entries {
            let (domain, id) = match name.split_once('/') {
                Some((domain, id)) => (domain.to_string(), id.to_string()),
                None => (driver.to_string(), name),
            };
            grouped.entry(domain).or_default().insert(CelMapKey::from(id), value(v));
        }
        let domains: HashMap<String, CelMap<'static>> =
            grouped.into_iter().map(|(domain, map)| (domain, CelMap::from(map))).collect();
        let mut keys: Vec<CelString<'static>> = domains.keys().map(|k| CelString::from(k.clone())).collect();
        keys.sort_by(|a, b| a.inner().cmp(b.inner()));
        DomainMap { domains, keys, empty: CelMap::default() }
    }

    fn lookup(&self, index: &dyn Val) -> Result<&CelMap<'static>, ExecutionError> {
        let key = index.downcast_ref::<CelString>().ok_or_else(|| ExecutionError::UnexpectedType {
            got: index.get_type().name().to_owned(),
            want: "string".to_owned(),
        })?;
        Ok(self.domains.get(key.inner()).unwrap_or(&self.empty))
    }
}

impl Val for DomainMap {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }
    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }
    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
}

impl Indexer for DomainMap {
    fn get<'b, 'v>(&'b self, index: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.lookup(index).map(|map| CowVal::Borrowed(map as &dyn Val))
    }

    fn steal<'v>(self: Box<Self>, index: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.lookup(index).map(|map| map.clone_as_boxed())
    }
}

impl Container for DomainMap {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        Ok(value.downcast_ref::<CelString>().is_some_and(|k| self.domains.contains_key(k.inner())))
    }
}

impl Sizer for DomainMap {
    fn size(&self) -> CelInt {
        CelInt::from(self.domains.len() as i64)
    }
}

struct Keys<'b>(std::slice::Iter<'b, CelString<'static>>);

impl<'b, 'v> CelIterator<'b, 'v> for Keys<'b> {
    fn next(&mut self) -> Option<&'b (dyn Val + 'v)> {
        self.0.next().map(|k| k as &dyn Val)
    }
}

impl Iterable for DomainMap {
    fn iter<'b, 'v>(&'b self) -> Box<dyn CelIterator<'b, 'v> + 'b>
    where
        Self: 'v,
    {
        Box::new(Keys(self.keys.iter()))
    }
}

/// The `device` a selector sees.
#[derive(Clone, Debug)]
pub struct DeviceVal {
    driver: CelString<'static>,
    attributes: DomainMap,
    capacity: DomainMap,
    allow_multiple_allocations: CelBool,
}

impl DeviceVal {
    pub fn new<'a>(
        driver: &str,
        attributes: impl IntoIterator<Item = (&'a str, &'a AttributeValue)>,
        capacity: impl IntoIterator<Item = (&'a str, Quantity)>,
        allow_multiple_allocations: bool,
    ) -> DeviceVal {
        let attribute = |v: &AttributeValue| -> Box<dyn Val> {
            match v {
                AttributeValue::Int(i) => Box::new(CelInt::from(*i)),
                AttributeValue::Bool(b) => Box::new(CelBool::from(*b)),
                AttributeValue::String(s) => Box::new(CelString::from(s.clone())),
                AttributeValue::Version(v) => Box::new(SemverVal(v.clone())),
            }
        };
        DeviceVal {
            driver: CelString::from(driver.to_string()),
            attributes: DomainMap::new(driver, attributes.into_iter().map(|(k, v)| (k.to_string(), v)), attribute),
            capacity: DomainMap::new(driver, capacity.into_iter().map(|(k, v)| (k.to_string(), v)), |q| {
                Box::new(QuantityVal(q))
            }),
            allow_multiple_allocations: CelBool::from(allow_multiple_allocations),
        }
    }

    fn field(&self, index: &dyn Val) -> Result<&(dyn Val + 'static), ExecutionError> {
        match index.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(&self.driver),
            Some("attributes") => Ok(&self.attributes),
            Some("capacity") => Ok(&self.capacity),
            Some("allowMultipleAllocations") => Ok(&self.allow_multiple_allocations),
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::UnexpectedType {
                got: index.get_type().name().to_owned(),
                want: "string".to_owned(),
            }),
        }
    }
}

impl Val for DeviceVal {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }
    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
}

impl Indexer for DeviceVal {
    fn get<'b, 'v>(&'b self, index: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.field(index).map(CowVal::Borrowed)
    }

    fn steal<'v>(self: Box<Self>, index: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.field(index).map(|v| v.clone_as_boxed())
    }
}
