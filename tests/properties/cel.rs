//! The CEL environment for device selectors, on generated expressions (a typed grammar
//! over `device.attributes`, `device.capacity`, comparisons, `&&`, `||`, `!`, `size()`,
//! the quantity and semver libraries, string and list functions, macros) and on garbage
//! text, against generated devices: compiling and evaluating never panic; a compiled
//! selector's estimated cost is within the budget, and evaluating it gives a bool or an
//! error, quickly and the same each time; negation means negation. Expressions whose work
//! grows with their nesting (comprehensions over device maps or over lists made at run
//! time, text that each call makes longer) are refused by the cost budget instead of
//! running long, and expressions nested deep enough to overflow the stack are refused.

use std::time::{Duration, Instant};

use muster::engine::dra::cel::{DeviceVal, MAX_COST, MAX_LENGTH, Selector};
use muster::engine::dra::model::AttributeValue;
use muster::engine::dra::semver::Semver;
use muster::quantity::Quantity;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

/// Far above what any selector within the budget takes, even on a loaded machine; a
/// selector that evaluates longer escaped the budget.
const SLOW: Duration = Duration::from_secs(5);

const DOMAINS: &[&str] = &["gpu.nvidia.com", "dra.example.com", "resource.kubernetes.io", "other.example.com"];
const NAMES: &[&str] = &["index", "productName", "mig", "driverVersion", "memory", "cores", "uuid", "type"];

/// A device as a driver might publish it.
#[derive(Clone, Debug)]
struct Device {
    driver: String,
    attributes: Vec<(String, AttributeValue)>,
    capacity: Vec<(String, Quantity)>,
    allow_multiple: bool,
}

impl Device {
    fn cel(&self) -> DeviceVal {
        DeviceVal::new(
            &self.driver,
            self.attributes.iter().map(|(k, v)| (k.as_str(), v)),
            self.capacity.iter().map(|(k, q)| (k.as_str(), *q)),
            self.allow_multiple,
        )
    }
}

/// The largest device a ResourceSlice may hold: 32 attributes of 64 characters, in one
/// domain, which the cost estimate assumes at most.
fn largest_device() -> Device {
    Device {
        driver: "gpu.nvidia.com".into(),
        attributes: (0..32)
            .map(|i| (format!("gpu.nvidia.com/a{i}"), AttributeValue::String(format!("{i:x>64}"))))
            .collect(),
        capacity: Vec::new(),
        allow_multiple: false,
    }
}

fn attribute_name() -> impl Strategy<Value = String> {
    (proptest::option::of(proptest::sample::select(DOMAINS)), proptest::sample::select(NAMES))
        .prop_map(|(domain, name)| domain.map_or(name.to_string(), |d| format!("{d}/{name}")))
}

fn semver_text() -> impl Strategy<Value = String> {
    (0u64..1000, 0u64..100, 0u64..100, proptest::option::of("[0-9A-Za-z-]{1,6}(\\.[0-9A-Za-z-]{1,4})?"))
        .prop_map(|(a, b, c, pre)| pre.map_or(format!("{a}.{b}.{c}"), |p| format!("{a}.{b}.{c}-{p}")))
}

fn quantity_text() -> impl Strategy<Value = String> {
    ("-?[0-9]{1,12}(\\.[0-9]{1,6})?", "(|Ki|Mi|Gi|Ti|m|k|M|G|e3|e-3)").prop_map(|(n, s)| format!("{n}{s}"))
}

fn attribute_value() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        any::<i64>().prop_map(AttributeValue::Int),
        any::<bool>().prop_map(AttributeValue::Bool),
        "\\PC{0,64}".prop_map(AttributeValue::String),
        semver_text().prop_filter_map("a version", |t| Semver::parse(&t).ok().map(AttributeValue::Version)),
    ]
}

fn device() -> impl Strategy<Value = Device> {
    (
        proptest::sample::select(DOMAINS),
        proptest::collection::vec((attribute_name(), attribute_value()), 0..10),
        proptest::collection::vec(
            (attribute_name(), quantity_text().prop_filter_map("a quantity", |t| Quantity::parse(&t).ok())),
            0..4,
        ),
        any::<bool>(),
    )
        .prop_map(|(driver, attributes, capacity, allow_multiple)| Device {
            driver: driver.to_string(),
            attributes,
            capacity,
            allow_multiple,
        })
}

/// A CEL string literal of `text`.
fn literal(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

fn string_literal() -> BoxedStrategy<String> {
    prop_oneof![
        proptest::sample::select(DOMAINS).prop_map(|d| d.to_string()),
        proptest::sample::select(NAMES).prop_map(|n| n.to_string()),
        quantity_text(),
        semver_text(),
        // Regular expressions, valid and not.
        proptest::sample::select(&["^NVIDIA (H|B)[0-9]+", "(", "[a-", "a{99999}", "(a*)*b", ".*", "\\d+"][..])
            .prop_map(|r| r.to_string()),
        "\\PC{0,12}",
    ]
    .prop_map(|s| literal(&s))
    .boxed()
}

fn int_literal() -> BoxedStrategy<String> {
    prop_oneof![
        (-5i64..40).prop_map(|i| i.to_string()),
        any::<i64>().prop_map(|i| if i < 0 { format!("({i})") } else { i.to_string() }),
        Just("9223372036854775807".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("-1".to_string()),
        Just("0".to_string()),
    ]
    .boxed()
}

/// `device.attributes[…]` or `device.capacity[…]`, by domain then name, plain or optional.
fn device_field(map: &'static str) -> BoxedStrategy<String> {
    (proptest::sample::select(DOMAINS), proptest::sample::select(NAMES), 0usize..4)
        .prop_map(move |(domain, name, form)| match form {
            0 => format!("device.{map}[{}][{}]", literal(domain), literal(name)),
            _ => format!("device.{map}[{}].{name}", literal(domain)),
        })
        .boxed()
}

/// Expressions of each type, one nesting level deeper than `inner`.
#[derive(Clone)]
struct Typed {
    boolean: BoxedStrategy<String>,
    int: BoxedStrategy<String>,
    string: BoxedStrategy<String>,
    quantity: BoxedStrategy<String>,
    semver: BoxedStrategy<String>,
    list: BoxedStrategy<String>,
}

fn leaves() -> Typed {
    let attribute = device_field("attributes");
    let capacity = device_field("capacity");
    Typed {
        boolean: prop_oneof![
            Just("true".to_string()),
            Just("false".to_string()),
            Just("device.allowMultipleAllocations".to_string()),
            attribute.clone(),
        ]
        .boxed(),
        int: prop_oneof![int_literal(), attribute.clone()].boxed(),
        string: prop_oneof![string_literal(), Just("device.driver".to_string()), attribute.clone()].boxed(),
        quantity: prop_oneof![capacity, quantity_text().prop_map(|q| format!("quantity({})", literal(&q)))].boxed(),
        semver: prop_oneof![attribute, semver_text().prop_map(|v| format!("semver({})", literal(&v)))].boxed(),
        list: prop_oneof![
            Just("[]".to_string()),
            Just("[1, 2, 3]".to_string()),
            proptest::sample::select(DOMAINS).prop_map(|d| format!("device.attributes[{}]", literal(d))),
            Just("device.attributes".to_string()),
        ]
        .boxed(),
    }
}

fn deeper(t: &Typed) -> Typed {
    let (b, i, s, q, v, l) =
        (t.boolean.clone(), t.int.clone(), t.string.clone(), t.quantity.clone(), t.semver.clone(), t.list.clone());
    let anything = prop_oneof![b.clone(), i.clone(), s.clone(), q.clone(), v.clone(), l.clone()].boxed();
    let compare = proptest::sample::select(&["==", "!=", "<", "<=", ">", ">="][..]);
    let arithmetic = proptest::sample::select(&["+", "-", "*", "/", "%"][..]);
    let boolean = prop_oneof![
        4 => b.clone(),
        2 => (b.clone(), b.clone()).prop_map(|(x, y)| format!("({x} && {y})")),
        2 => (b.clone(), b.clone()).prop_map(|(x, y)| format!("({x} || {y})")),
        1 => b.clone().prop_map(|x| format!("!{x}")),
        1 => (b.clone(), b.clone(), b.clone()).prop_map(|(c, x, y)| format!("({c} ? {x} : {y})")),
        2 => (i.clone(), compare.clone(), i.clone()).prop_map(|(x, op, y)| format!("({x} {op} {y})")),
        1 => (s.clone(), s.clone()).prop_map(|(x, y)| format!("({x} == {y})")),
        // Comparisons across types: errors or false, never panics.
        1 => (anything.clone(), compare.clone(), anything.clone()).prop_map(|(x, op, y)| format!("({x} {op} {y})")),
        1 => (q.clone(), q.clone(), any::<bool>()).prop_map(|(x, y, greater)| {
            format!("{x}.{}({y})", if greater { "isGreaterThan" } else { "isLessThan" })
        }),
        1 => q.clone().prop_map(|x| format!("{x}.isInteger()")),
        1 => (v.clone(), v.clone()).prop_map(|(x, y)| format!("{x}.isGreaterThan({y})")),
        1 => s.clone().prop_map(|x| format!("isQuantity({x})")),
        1 => (s.clone(), any::<bool>()).prop_map(|(x, n)| format!("isSemver({x}, {n})")),
        1 => device_field("attributes").prop_map(|f| format!("has({f})")),
        1 => (s.clone(), l.clone()).prop_map(|(x, y)| format!("({x} in {y})")),
        1 => (s.clone(), s.clone(), 0usize..4).prop_map(|(x, y, f)| {
            format!("{x}.{}({y})", ["startsWith", "endsWith", "contains", "matches"][f])
        }),
        1 => (l.clone(), b.clone(), 0usize..3).prop_map(|(x, y, f)| {
            format!("{x}.{}(k, {y})", ["all", "exists", "exists_one"][f])
        }),
        1 => (l.clone(), i.clone()).prop_map(|(x, y)| format!("{x}.exists(k, k == {y})")),
        1 => (device_field("attributes"), i.clone()).prop_map(|(f, y)| {
            let optional = match f.rsplit_once('.') {
                Some((head, name)) if !f.ends_with(']') => format!("{head}.?{name}"),
                _ => f.clone(),
            };
            format!("({optional}.orValue({y}) == {y})")
        }),
    ]
    .boxed();
    let int = prop_oneof![
        3 => i.clone(),
        2 => (i.clone(), arithmetic, i.clone()).prop_map(|(x, op, y)| format!("({x} {op} {y})")),
        1 => anything.clone().prop_map(|x| format!("size({x})")),
        1 => s.clone().prop_map(|x| format!("{x}.size()")),
        1 => (q.clone(), q.clone()).prop_map(|(x, y)| format!("{x}.compareTo({y})")),
        1 => (q.clone(), 0usize..2).prop_map(|(x, f)| format!("{x}.{}()", ["asInteger", "sign"][f])),
        1 => q.clone().prop_map(|x| format!("sign({x})")),
        1 => (v.clone(), 0usize..4).prop_map(|(x, f)| format!("{x}.{}()", ["major", "minor", "patch", "major"][f])),
        1 => (s.clone(), s.clone()).prop_map(|(x, y)| format!("{x}.indexOf({y})")),
        1 => anything.clone().prop_map(|x| format!("int({x})")),
    ]
    .boxed();
    let string = prop_oneof![
        3 => s.clone(),
        1 => (s.clone(), s.clone()).prop_map(|(x, y)| format!("({x} + {y})")),
        1 => (s.clone(), 0usize..4).prop_map(|(x, f)| format!("{x}.{}()", ["lowerAscii", "upperAscii", "trim", "reverse"][f])),
        1 => (s.clone(), i.clone(), i.clone()).prop_map(|(x, a, c)| format!("{x}.substring({a}, {c})")),
        1 => (s.clone(), i.clone()).prop_map(|(x, a)| format!("{x}.charAt({a})")),
        1 => (s.clone(), s.clone(), s.clone()).prop_map(|(x, a, c)| format!("{x}.replace({a}, {c})")),
        1 => anything.clone().prop_map(|x| format!("string({x})")),
        1 => (l.clone(), s.clone()).prop_map(|(x, y)| format!("{x}.join({y})")),
    ]
    .boxed();
    let quantity = prop_oneof![
        3 => q.clone(),
        1 => (q.clone(), q.clone(), any::<bool>()).prop_map(|(x, y, add)| format!("{x}.{}({y})", if add { "add" } else { "sub" })),
        1 => (q.clone(), i.clone()).prop_map(|(x, y)| format!("{x}.add({y})")),
        1 => s.clone().prop_map(|x| format!("quantity({x})")),
    ]
    .boxed();
    let semver = prop_oneof![
        3 => v.clone(),
        1 => s.clone().prop_map(|x| format!("semver({x})")),
        1 => (s.clone(), any::<bool>()).prop_map(|(x, n)| format!("semver({x}, {n})")),
    ]
    .boxed();
    let list = prop_oneof![
        3 => l.clone(),
        1 => (anything.clone(), anything.clone()).prop_map(|(x, y)| format!("[{x}, {y}]")),
        1 => (s.clone(), s.clone()).prop_map(|(x, y)| format!("{x}.split({y})")),
        1 => (l.clone(), b.clone()).prop_map(|(x, y)| format!("{x}.filter(k, {y})")),
        1 => (l.clone(), anything.clone()).prop_map(|(x, y)| format!("{x}.map(k, {y})")),
        1 => (l.clone(), i.clone(), i.clone()).prop_map(|(x, a, c)| format!("{x}.slice({a}, {c})")),
        1 => (l.clone(), 0usize..4).prop_map(|(x, f)| format!("{x}.{}()", ["distinct", "reverse", "sort", "flatten"][f])),
        1 => (0i64..50).prop_map(|n| format!("lists.range({n})")),
    ]
    .boxed();
    Typed { boolean, int, string, quantity, semver, list }
}

/// Boolean selectors up to four levels deep, sometimes of another type (a compile-time
/// or run-time error).
fn selector() -> BoxedStrategy<String> {
    let mut typed = leaves();
    for _ in 0..4 {
        typed = deeper(&typed);
    }
    prop_oneof![
        8 => typed.boolean,
        1 => typed.int,
        1 => typed.string,
        1 => typed.quantity,
        1 => typed.semver,
        1 => typed.list,
    ]
    .boxed()
}

/// Text that is mostly not CEL: tokens of selectors in random order, deep nesting, and
/// arbitrary strings.
fn garbage() -> BoxedStrategy<String> {
    let tokens = proptest::sample::select(
        &[
            "device",
            ".",
            "attributes",
            "capacity",
            "[",
            "]",
            "(",
            ")",
            "\"gpu.nvidia.com\"",
            "'x'",
            "&&",
            "||",
            "!",
            "==",
            "<",
            "quantity",
            "semver",
            "size",
            "has",
            "all",
            "exists",
            "x",
            ",",
            "?",
            ":",
            "1",
            "-",
            "1u",
            "1.5",
            "b\"x\"",
            "r'\\d'",
            "{",
            "}",
            "in",
            "null",
            "\"\"\"",
            "\\",
            ".?",
            "lists.range",
            "e",
        ][..],
    );
    // Up to the longest selector accepted: deep enough to overflow a recursive parser or
    // evaluator.
    let nested =
        proptest::sample::select(&[("(", ")"), ("!", ""), ("-", ""), ("[", "]"), ("{1:", "}"), ("size(", ")")][..])
            .prop_flat_map(|(open, close)| (Just((open, close)), 1..(MAX_LENGTH - 4) / (open.len() + close.len())))
            .prop_map(|((open, close), depth)| format!("{}true{}", open.repeat(depth), close.repeat(depth)));
    let chained = proptest::sample::select(&["+1", "&&true", "||x", ".x", "[0]", "==1", ".x()", " in a", "?1:1"][..])
        .prop_flat_map(|link| (Just(link), 1..(MAX_LENGTH - 1) / link.len()))
        .prop_map(|(link, n)| format!("1{}", link.repeat(n)));
    prop_oneof![
        3 => proptest::collection::vec(tokens, 0..40).prop_map(|t| t.join(" ")),
        2 => nested,
        2 => chained,
        1 => any::<String>(),
        1 => "\\PC{0,200}",
    ]
    .boxed()
}

/// What a selector gave on a device.
type Evaluation = Result<bool, String>;

/// What became of one expression on one device.
struct Outcome {
    compiled: Result<u64, String>,
    /// Evaluated twice, with the time the first took.
    evaluated: Option<(Evaluation, Evaluation, Duration)>,
}

/// Compiles `expression` and runs it twice on `device`, on a thread of its own with the
/// default stack (as the scheduler's worker threads have): a panic or a stack overflow is
/// the case's failure, and an evaluation still running after [`SLOW`] fails the case
/// rather than hanging the test.
fn run(expression: &str, device: &Device) -> Result<Outcome, TestCaseError> {
    let (text, device) = (expression.to_string(), device.clone());
    let (send, receive) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let device = device.cel();
        let outcome = match Selector::compile(&text) {
            Err(e) => Outcome { compiled: Err(e.to_string()), evaluated: None },
            Ok(selector) => {
                let evaluate = || selector.matches(&device).map_err(|e| e.to_string());
                let started = Instant::now();
                let first = evaluate();
                let took = started.elapsed();
                Outcome { compiled: Ok(selector.cost), evaluated: Some((first, evaluate(), took)) }
            }
        };
        let _ = send.send(outcome);
    });
    match receive.recv_timeout(SLOW) {
        Ok(outcome) => {
            let _ = worker.join();
            Ok(outcome)
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            Err(TestCaseError::fail(format!("{expression}: still compiling or evaluating after {SLOW:?}")))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let panic = worker.join().err().map(|p| {
                p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            });
            Err(TestCaseError::fail(format!("{expression}: panicked: {panic:?}")))
        }
    }
}

/// The properties of every expression: a refusal says why; a compiled selector is within
/// the budget and gives a bool or an error, quickly and the same twice.
fn check(expression: &str, device: &Device) -> Result<Option<bool>, TestCaseError> {
    let outcome = run(expression, device)?;
    let cost = match outcome.compiled {
        Ok(cost) => cost,
        Err(e) => {
            prop_assert!(!e.is_empty());
            prop_assert!(
                expression.len() <= MAX_LENGTH || e.contains("characters long"),
                "{expression}: refused for {e}"
            );
            return Ok(None);
        }
    };
    prop_assert!(cost <= MAX_COST, "{}: cost {}", expression, cost);
    let (first, second, took) = outcome.evaluated.expect("a compiled selector is evaluated");
    prop_assert!(took < SLOW, "{}: cost {} but took {:?}", expression, cost, took);
    if let Err(e) = &first {
        prop_assert!(!e.is_empty(), "{}: an empty error", expression);
    }
    prop_assert_eq!(&second, &first, "{} twice", expression);
    Ok(first.ok())
}

proptest! {
    #![proptest_config(super::cases(600))]

    #[test]
    fn generated_selectors_on_generated_devices_give_a_bool_or_an_error(
        expression in selector(),
        device in device(),
    ) {
        // Negation means negation: where the selector gives a bool, its negation gives the other.
        if let Some(value) = check(&expression, &device)? {
            let negated = format!("!({expression})");
            if let Ok(Some((result, _, _))) = run(&negated, &device).map(|o| o.evaluated) {
                prop_assert_eq!(result, Ok(!value), "{}", negated);
            }
        }
    }

    #[test]
    fn garbage_never_panics(text in garbage(), device in device()) {
        check(&text, &device)?;
    }
}

/// Comprehensions over the device's maps, nested `depth` deep around a body that builds and
/// matches strings.
fn nested_comprehensions(depth: usize, over: &str, body: &str) -> String {
    let mut expression = body.to_string();
    for level in (0..depth).rev() {
        expression = format!("{over}.all(v{level}, {expression})");
    }
    expression
}

proptest! {
    #![proptest_config(super::cases(200))]

    /// Work that grows with nesting is paid for: each comprehension over a device map
    /// multiplies the cost of its body by the largest map, four levels are refused, and
    /// what is accepted runs quickly on the largest device.
    #[test]
    fn nesting_multiplies_the_cost_and_deep_loops_are_refused(
        depth in 1usize..6,
        over in proptest::sample::select(&[
            "device.attributes[\"gpu.nvidia.com\"]",
            "device.capacity[\"gpu.nvidia.com\"]",
            "device.attributes",
        ][..]),
        body in proptest::sample::select(&[
            "true",
            "v0 != \"\"",
            "(v0 + v0).matches(\"^x.*y$\") == false",
            "v0.lowerAscii().contains(\"a\") || v0.size() > 3",
        ][..]),
    ) {
        let inner = Selector::compile(&nested_comprehensions(depth - 1, over, body)).map(|s| s.cost);
        let outer = nested_comprehensions(depth, over, body);
        match Selector::compile(&outer) {
            Ok(selector) => {
                prop_assert!(depth < 4, "{} levels accepted, cost {}", depth, selector.cost);
                if let Ok(inner) = inner {
                    prop_assert!(selector.cost >= 64 * inner, "{}: {} < 64 × {}", outer, selector.cost, inner);
                }
                check(&outer, &largest_device())?;
            }
            Err(e) => prop_assert!(e.to_string().contains("exceeds the budget"), "{}: {}", outer, e),
        }
    }

    /// Lists made at run time (`split`, `map`, literals) are as costly to walk as they are
    /// long: loops whose iterations alone exceed the budget are refused, and what is
    /// accepted runs quickly.
    #[test]
    fn loops_over_lists_made_at_run_time_are_bounded(
        n in prop_oneof![0usize..100, 100usize..9000],
        depth in 1usize..4,
        (maker, length) in proptest::sample::select(&[
            ("\"TEXT\".split(\"\")", (|n| n) as fn(usize) -> usize),
            ("\"TEXT\".split(\"\").map(x, x + x)", |n| n),
            ("\"TEXT\".split(\"\").filter(x, x != \"b\")", |n| n),
            ("\"TEXT\".split(\"\").sort()", |n| n),
            ("\"TEXT\".split(\"\").distinct()", |n| n.min(1)),
            ("[\"TEXT\".split(\"\"), [1, 2]].flatten()", |n| n + 2),
            ("device.attributes[\"gpu.nvidia.com\"].map(k, \"TEXT\".split(\"\"))", |_| 32),
        ][..]),
    ) {
        let over = maker.replace("TEXT", &"a".repeat(n));
        let expression = nested_comprehensions(depth, &over, "v0 != \"\" || true");
        let iterations = (length(n) as u64).saturating_pow(depth as u32);
        if iterations > MAX_COST {
            let refused = Selector::compile(&expression).err();
            prop_assert!(refused.is_some(), "{} iterations accepted: {}", iterations, &expression[..expression.len().min(200)]);
        }
        check(&expression, &largest_device())?;
    }

}

proptest! {
    // Few cases: there are 120 combinations, and the accepted ones build long texts.
    #![proptest_config(super::cases(100))]

    /// Calls whose result is many times longer than their input (`replace` with an empty
    /// pattern, `split` then `join`, `join` of `map`) are paid for by length: text whose
    /// building alone exceeds the budget (a tenth per character, as cel-go charges) is
    /// refused before it outgrows memory.
    #[test]
    fn texts_that_grow_with_each_call_are_paid_for(
        levels in 1usize..=8,
        start in proptest::sample::select(&["x", "xx", "xyx"][..]),
        (grower, grow) in proptest::sample::select(&[
            (".replace(\"\", \"xxxxxxxxxx\")", (|t: &str| t.replace("", "xxxxxxxxxx")) as fn(&str) -> String),
            (".replace(\"x\", \"xxxxxxxxxx\")", |t| t.replace('x', "xxxxxxxxxx")),
            (".split(\"x\").join(\"xxxxxxxxxx\")", |t| t.split('x').collect::<Vec<_>>().join("xxxxxxxxxx")),
            (".split(\"\").join(\"xxxxxxxxxx\")", |t| t.chars().map(String::from).collect::<Vec<_>>().join("xxxxxxxxxx")),
            (".split(\"x\").map(p, \"xxxxxxxxxx\").join(\"\")", |t| "xxxxxxxxxx".repeat(t.split('x').count())),
        ][..]),
    ) {
        let expression = format!("{}{}.size() > 0", literal(start), grower.repeat(levels));
        // The text each call builds, until one is long enough to exceed the budget.
        let mut text = start.to_string();
        let mut built = 0u64;
        for _ in 0..levels {
            if built > 10 * MAX_COST {
                break;
            }
            text = grow(&text);
            built += text.len() as u64;
        }
        if built > 10 * MAX_COST {
            prop_assert!(Selector::compile(&expression).is_err(), "{} characters built: {}", built, expression);
        }
        check(&expression, &largest_device())?;
    }
}

#[test]
fn deep_selectors_are_refused_before_they_can_overflow_the_stack() {
    let chain = |links: usize| format!("1{} > 0", " + 1".repeat(links));
    let device = largest_device();
    assert_eq!(check(&chain(200), &device).map_err(|e| e.to_string()), Ok(Some(true)));
    let deep = Selector::compile(&chain(300)).unwrap_err().to_string();
    assert!(deep.contains("nested more than"), "{deep}");
    let long = Selector::compile(&chain(2000)).unwrap_err().to_string();
    assert!(long.contains("operators"), "{long}");
}

#[test]
fn estimates_too_large_to_count_are_refused_not_overflowed() {
    // Sizes that saturate the estimate's arithmetic, then a regular expression over them.
    let huge = format!("\"x\"{}", ".split(\"x\").join(\"x\")".repeat(8));
    for expression in
        [format!("\"a\".matches({huge})"), format!("{huge}.matches(\"a\")"), format!("{huge} + {huge} == \"\"")]
    {
        let refused = Selector::compile(&expression).unwrap_err().to_string();
        assert!(refused.contains("exceeds the budget"), "{expression}: {refused}");
    }
}

#[test]
fn ordinary_selectors_compile_cheaply_and_match() {
    let device = largest_device().cel();
    for expression in [
        r#"device.driver == "gpu.nvidia.com""#,
        r#"device.attributes["gpu.nvidia.com"].a1.startsWith("x")"#,
        r#"device.attributes["gpu.nvidia.com"].all(k, k.startsWith("a"))"#,
    ] {
        let selector = Selector::compile(expression).unwrap();
        assert!(selector.cost < 1000, "{expression}: cost {}", selector.cost);
        assert_eq!(selector.matches(&device), Ok(true), "{expression}");
    }
}
