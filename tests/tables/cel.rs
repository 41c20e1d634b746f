//! Kubernetes' CEL environment for device selectors, case by case: the expression, the
//! device it runs on, and what Kubernetes' allocator would say (true, false, or an error).

use muster::engine::dra::cel::{DeviceVal, MAX_COST, Selector};
use muster::engine::dra::model::AttributeValue;
use muster::engine::dra::semver::Semver;
use muster::quantity::Quantity;

/// An H100 as NVIDIA's DRA driver publishes it, under the driver gpu.nvidia.com.
fn h100() -> DeviceVal {
    let attributes = [
        ("gpu.nvidia.com/type", AttributeValue::String("gpu".into())),
        ("gpu.nvidia.com/productName", AttributeValue::String("NVIDIA H100 80GB HBM3".into())),
        ("gpu.nvidia.com/architecture", AttributeValue::String("Hopper".into())),
        ("gpu.nvidia.com/index", AttributeValue::Int(3)),
        ("gpu.nvidia.com/driverVersion", AttributeValue::Version(Semver::parse("580.95.5").unwrap())),
        ("gpu.nvidia.com/cudaComputeCapability", AttributeValue::Version(Semver::parse("9.0.0").unwrap())),
        ("resource.kubernetes.io/pcieRoot", AttributeValue::String("pci0000:40".into())),
        ("gpu.nvidia.com/mig", AttributeValue::Bool(false)),
    ];
    let capacity = [("gpu.nvidia.com/memory", Quantity::parse("80Gi").unwrap())];
    DeviceVal::new(
        "gpu.nvidia.com",
        attributes.iter().map(|(k, v)| (*k, v)),
        capacity.iter().map(|(k, q)| (*k, *q)),
        false,
    )
}

#[derive(Debug)]
enum Expect {
    True,
    False,
    /// An error at run time, whose text contains this.
    RunError(&'static str),
    /// Refused when compiled, with this in the reason.
    CompileError(&'static str),
}
use Expect::*;

const CASES: &[(&str, Expect)] = &[
    // The guide's selector, and the quantity library.
    (r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0"#, True),
    (r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("81Gi")) >= 0"#, False),
    (r#"device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))"#, True),
    (r#"device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("40Gi"))"#, False),
    (r#"device.capacity["gpu.nvidia.com"].memory == quantity("85899345920")"#, True),
    (r#"device.capacity["gpu.nvidia.com"].memory.asInteger() == 85899345920"#, True),
    (
        r#"device.capacity["gpu.nvidia.com"].memory.sub(quantity("40Gi")).add(quantity("40Gi")) == quantity("80Gi")"#,
        True,
    ),
    (r#"quantity("1.5").add(2) == quantity("3.5")"#, True),
    (r#"quantity("1.5").sub(2).sign() == -1"#, True),
    (r#"sign(quantity("-3")) == -1"#, True),
    (r#"quantity("1.5").isInteger()"#, False),
    (r#"quantity("1.5").asApproximateFloat() == 1.5"#, True),
    (r#"isQuantity("80Gi") && !isQuantity("eighty")"#, True),
    (r#"quantity("1.5").asInteger() == 1"#, RunError("not an integer")),
    (r#"quantity("eighty") == quantity("80")"#, RunError("invalid quantity")),
    // Attributes by domain; short names live under the driver's domain.
    (r#"device.driver == "gpu.nvidia.com""#, True),
    (r#"device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")"#, True),
    (r#"device.attributes["gpu.nvidia.com"].index == 3"#, True),
    (r#"device.attributes["gpu.nvidia.com"].mig"#, False),
    (r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:40""#, True),
    (r#"device.allowMultipleAllocations"#, False),
    // An unknown domain is an empty map; an unknown name in it is an error, and has() is false.
    (r#"device.attributes["other.example.com"].size() == 0"#, True),
    (r#"has(device.attributes["gpu.nvidia.com"].productName)"#, True),
    (r#"has(device.attributes["gpu.nvidia.com"].cores)"#, False),
    (r#"has(device.attributes["other.example.com"].cores)"#, False),
    (r#""gpu.nvidia.com" in device.attributes"#, True),
    (r#""other.example.com" in device.attributes"#, False),
    (r#"device.attributes["gpu.nvidia.com"].cores > 1000"#, RunError("cores")),
    (r#"device.attributes["other.example.com"].cores > 1000"#, RunError("cores")),
    // Optional values.
    (r#"device.attributes["gpu.nvidia.com"].?cores.orValue(0) == 0"#, True),
    (r#"device.attributes["gpu.nvidia.com"].?index.hasValue()"#, True),
    (r#"device.attributes["gpu.nvidia.com"].?index.orValue(0) == 3"#, True),
    // The semver library on version attributes.
    (r#"device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))"#, True),
    (r#"device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("580.95.5")) == 0"#, True),
    (r#"device.attributes["gpu.nvidia.com"].driverVersion.major() == 580"#, True),
    (r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.minor() == 0"#, True),
    (r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.isLessThan(semver("8.0.0"))"#, False),
    (r#"device.attributes["gpu.nvidia.com"].driverVersion == semver("580.95.5")"#, True),
    (r#"semver("v1.2", true).patch() == 0 && isSemver("1.2.3") && !isSemver("1.2")"#, True),
    (r#"semver("1.2") == semver("1.2.0")"#, RunError("semantic version")),
    // String extensions and regular expressions, as real selectors use them.
    (r#"device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")"#, True),
    (r#"device.attributes["gpu.nvidia.com"].productName.upperAscii() == "NVIDIA H100 80GB HBM3""#, True),
    (r#"device.attributes["gpu.nvidia.com"].productName.split(" ")[1] == "H100""#, True),
    (r#"device.attributes["gpu.nvidia.com"].productName.indexOf("H100") == 7"#, True),
    (r#"device.attributes["gpu.nvidia.com"].productName.replace("NVIDIA ", "").trim() == "H100 80GB HBM3""#, True),
    (r#"device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA (H|B)[0-9]+")"#, True),
    (r#"device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell"]"#, True),
    (r#"["a", "b"].all(x, device.attributes["gpu.nvidia.com"].productName != x)"#, True),
    (r#"device.attributes["gpu.nvidia.com"].exists(k, k == "uuid")"#, False),
    // Results that are not bools, and what the API server's checker would refuse.
    (r#"device.attributes["gpu.nvidia.com"].index"#, RunError("must evaluate to bool")),
    (r#"device.attributes["gpu.nvidia.com"].index == "3""#, False),
    (r#"device.attributes["gpu.nvidia.com"].index > "3""#, RunError("")),
    (r#"device.attributes["gpu.nvidia.com"].productName ==="#, CompileError("compilation failed")),
    (r#"gpu.memory > 1"#, CompileError("undeclared reference to 'gpu'")),
];

#[test]
fn selectors_mean_what_they_mean_in_kubernetes() {
    let device = h100();
    let mut failures = Vec::new();
    for (expression, expect) in CASES {
        let outcome = Selector::compile(expression).map(|s| s.matches(&device));
        let ok = match (&outcome, expect) {
            (Ok(Ok(true)), True) | (Ok(Ok(false)), False) => true,
            (Ok(Err(e)), RunError(part)) => e.to_string().contains(part),
            (Err(e), CompileError(part)) => e.to_string().contains(part),
            _ => false,
        };
        if !ok {
            failures.push(format!("{expression}\n    expected {expect:?}, got {outcome:?}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), CASES.len(), failures.join("\n"));
}

#[test]
fn an_expression_too_costly_to_evaluate_is_refused_before_it_runs() {
    // Three nested loops over the device's attributes, each building strings: the worst
    // case is far beyond the budget Kubernetes sets for a selector.
    let expensive = r#"device.attributes["gpu.nvidia.com"].all(a, device.attributes["gpu.nvidia.com"].all(b,
        device.attributes["gpu.nvidia.com"].all(c, device.attributes["gpu.nvidia.com"].all(d,
        (a + b + c + d).matches("^x.*y.*z$") == false))))"#;
    let error = Selector::compile(expensive).unwrap_err().to_string();
    assert!(error.contains(&format!("exceeds the budget of {MAX_COST}")), "{error}");
    // A realistic selector costs little.
    let cheap =
        Selector::compile(r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0"#).unwrap();
    assert!(cheap.cost < 100, "cost {}", cheap.cost);
}
