//! Kubernetes' CEL environment for device selectors, on the `cel` crate.
//!
//! The standard library with optional values and `matches`, the strings and lists
//! extensions (`lowerAscii`, `split`, `indexOf`, `slice`, …), Kubernetes' Quantity and
//! Semver libraries, and one
//! variable, `device` ([`device::DeviceVal`]). A selector is compiled once
//! ([`Selector::compile`]); its worst-case cost is checked against the budget then, because
//! the engine has no clock to stop a long evaluation. A result that is not a bool, and
//! every run-time error, is an error for the caller to report, never a silent `false`.

pub mod cost;
pub mod device;
pub mod library;

use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::types::CelBool;
use cel::common::value::CowVal;
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, ParseErrors, Program, Value};

pub use device::DeviceVal;

/// The cost budget of one selector, as Kubernetes sets it for device selectors
/// (`CELSelectorExpressionMaxCost`).
pub const MAX_COST: u64 = 1_000_000;
/// The longest selector the API server accepts (`CELSelectorExpressionMaxLength`).
pub const MAX_LENGTH: usize = 10 * 1024;
/// The most operator characters (`.`, `[`, `(`, `+`, `=`, `&`, …, and the word `in`) a
/// selector may have. The parser recurses once per link of a chain such as `a.b.c…` or
/// `1 + 1 + …`, so a selector within [`MAX_LENGTH`] could overflow the stack; cel-go's
/// parser refuses such nesting long before (its recursion limit). Counted in string
/// literals too, which keeps the count simple; real selectors have a few dozen.
pub const MAX_OPERATORS: usize = 500;

/// The shared environment: built once per process.
pub fn environment() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        env.add_extension(cel::extensions::strings).expect("the strings extension registers once");
        env.add_extension(cel::extensions::lists).expect("the lists extension registers once");
        env.add_extension(library::kubernetes).expect("the Kubernetes libraries register once");
        Arc::new(env)
    })
}

/// Why a selector does not compile: why the API server would have refused it.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Longer than [`MAX_LENGTH`]; its length.
    #[error("expression is {length} characters long, more than the {max} allowed", max = MAX_LENGTH)]
    TooLong { length: usize },
    /// More operators than [`MAX_OPERATORS`]: nested too deeply for the parser.
    #[error("expression has {operators} operators, more than the {max} allowed: it is nested too deeply", max = MAX_OPERATORS)]
    TooManyOperators { operators: usize },
    /// The parser refused it.
    #[error("compilation failed: {0}")]
    Parse(#[from] ParseErrors),
    /// The checker would refuse it (a name other than `device`, too deep a nesting).
    #[error("compilation failed: {0}")]
    Check(#[from] cost::Error),
    /// Its worst-case cost exceeds [`MAX_COST`].
    #[error(
        "estimated cost {cost} exceeds the budget of {max}: the expression may take too long to evaluate",
        max = MAX_COST
    )]
    TooCostly { cost: u64 },
}

/// Why a compiled selector gives no verdict on a device.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// An error at run time (a missing attribute, mismatched types, …), as CEL words it.
    #[error(transparent)]
    Execution(#[from] ExecutionError),
    /// The result is not a bool; the name of its type.
    #[error("must evaluate to bool, got {0}")]
    NotABool(String),
}

/// A compiled device selector.
pub struct Selector {
    pub expression: String,
    pub cost: u64,
    program: Program,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Selector({:?})", self.expression)
    }
}

impl PartialEq for Selector {
    fn eq(&self, other: &Selector) -> bool {
        self.expression == other.expression
    }
}

struct OneDevice<'d>(&'d DeviceVal);

impl VariableResolver for OneDevice<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "device").then(|| CowVal::Borrowed(self.0 as &dyn cel::common::value::Val))
    }
}

impl Selector {
    /// Compiles `expression`; the error says why the API server would have refused it.
    pub fn compile(expression: &str) -> Result<Selector, CompileError> {
        if expression.len() > MAX_LENGTH {
            return Err(CompileError::TooLong { length: expression.len() });
        }
        let operators = expression.bytes().filter(|b| b".[({!-+*/%<>=&|?".contains(b)).count()
            + expression.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| *w == "in").count();
        if operators > MAX_OPERATORS {
            return Err(CompileError::TooManyOperators { operators });
        }
        let program = environment().compile(expression)?;
        let cost = cost::estimate(program.expression())?;
        if cost > MAX_COST {
            return Err(CompileError::TooCostly { cost });
        }
        Ok(Selector { expression: expression.to_string(), cost, program })
    }

    /// Whether `device` matches; a run-time error or a result that is not a bool is an error.
    pub fn matches(&self, device: &DeviceVal) -> Result<bool, EvalError> {
        let resolver = OneDevice(device);
        let mut context = Context::with_env(Arc::clone(environment()));
        context.set_variable_resolver(&resolver);
        let value = Value::resolve_val(self.program.expression(), &context)?;
        match value.downcast_ref::<CelBool>() {
            Some(b) => Ok(*b.inner()),
            None => Err(EvalError::NotABool(value.get_type().name().to_string())),
        }
    }
}
