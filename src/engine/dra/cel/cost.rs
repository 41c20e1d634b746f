//! A worst-case cost estimate of a selector, in the spirit of cel-go's estimator that the
//! API server applies to device selectors, and the static checks the API server's type
//! checker would make that the parser does not (variables other than `device`).
//!
//! The engine has no clock, so evaluation is bounded up front: a selector whose estimate
//! exceeds the budget is refused when it is compiled, before it ever runs. Sizes are
//! bounded by what a ResourceSlice may hold (32 attributes and capacities per device,
//! strings of at most 64 characters), so the estimate bounds every real evaluation.

use cel::common::ast::{Expr, LiteralValue};
use cel::parser::Expression;

/// Largest collection or string a device can hand a selector.
const DEVICE_VALUE_SIZE: u64 = 64;

/// The deepest expression accepted. Evaluation recurses once per level, so a deeper one
/// could overflow the stack; cel-go's parser refuses deep nesting too (its recursion limit).
pub const MAX_DEPTH: usize = 250;

/// What the API server's checker would reject in an expression, found while estimating it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Nested more than [`MAX_DEPTH`] levels deep.
    #[error("expression nested more than {max} levels deep", max = MAX_DEPTH)]
    TooDeep,
    /// A name that neither a comprehension binds nor is `device`.
    #[error("undeclared reference to '{0}' (only `device` is defined)")]
    Undeclared(String),
}

/// Cost and largest size (string length, list or map entries) of an expression's value.
#[derive(Clone, Copy, Debug, Default)]
struct Estimate {
    cost: u64,
    size: u64,
}

struct Walker<'a> {
    /// Names bound by enclosing comprehensions, with the size of what they hold.
    scope: Vec<(&'a str, u64)>,
    problem: Option<Error>,
    /// How deep the walk is: it stops at [`MAX_DEPTH`], so it cannot overflow the stack.
    depth: usize,
}

fn scaled(size: u64) -> u64 {
    // cel-go charges string and list traversals a tenth of a unit per element.
    size.div_ceil(10)
}

impl<'a> Walker<'a> {
    fn walk(&mut self, expr: &'a Expression) -> Estimate {
        if self.depth >= MAX_DEPTH {
            if self.problem.is_none() {
                self.problem = Some(Error::TooDeep);
            }
            return Estimate::default();
        }
        self.depth += 1;
        let estimate = self.walk_node(expr);
        self.depth -= 1;
        estimate
    }

    fn walk_node(&mut self, expr: &'a Expression) -> Estimate {
        match &expr.expr {
            Expr::Unspecified => Estimate::default(),
            Expr::Literal(LiteralValue::String(s)) => Estimate { cost: 0, size: s.inner().len() as u64 },
            Expr::Literal(LiteralValue::Bytes(b)) => Estimate { cost: 0, size: b.inner().len() as u64 },
            Expr::Literal(_) => Estimate::default(),
            Expr::Ident(name) => {
                if let Some((_, size)) = self.scope.iter().rev().find(|(n, _)| n == name) {
                    return Estimate { cost: 1, size: *size };
                }
                if name != "device" && self.problem.is_none() {
                    self.problem = Some(Error::Undeclared(name.to_string()));
                }
                Estimate { cost: 1, size: DEVICE_VALUE_SIZE }
            }
            Expr::Select(select) => {
                let operand = self.walk(&select.operand);
                Estimate { cost: operand.cost.saturating_add(1), size: DEVICE_VALUE_SIZE.max(operand.size) }
            }
            Expr::List(list) => {
                let mut cost = 10u64;
                let mut element = 0u64;
                for e in &list.elements {
                    let est = self.walk(e);
                    cost = cost.saturating_add(est.cost);
                    element = element.max(est.size);
                }
                Estimate { cost, size: (list.elements.len() as u64).max(element) }
            }
            Expr::Map(map) => {
                let mut cost = 30u64;
                for entry in &map.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(e) = &entry.expr {
                        cost = cost.saturating_add(self.walk(&e.key).cost).saturating_add(self.walk(&e.value).cost);
                    }
                }
                Estimate { cost, size: map.entries.len() as u64 }
            }
            Expr::Struct(s) => {
                let mut cost = 40u64;
                for entry in &s.entries {
                    if let cel::common::ast::EntryExpr::StructField(f) = &entry.expr {
                        cost = cost.saturating_add(self.walk(&f.value).cost);
                    }
                }
                Estimate { cost, size: s.entries.len() as u64 }
            }
            Expr::Call(call) => {
                let mut cost = 0u64;
                let mut sizes = Vec::with_capacity(call.args.len() + 1);
                if let Some(target) = &call.target {
                    let est = self.walk(target);
                    cost = cost.saturating_add(est.cost);
                    sizes.push(est.size);
                }
                for arg in &call.args {
                    let est = self.walk(arg);
                    cost = cost.saturating_add(est.cost);
                    sizes.push(est.size);
                }
                let largest = sizes.iter().copied().max().unwrap_or(0);
                let total: u64 = sizes.iter().copied().fold(0u64, u64::saturating_add);
                let (call_cost, size) = match call.func_name.as_str() {
                    // Concatenation and the string functions walk their inputs.
                    "_+_" => (1 + scaled(total), total),
                    "_==_" | "_!=_" | "contains" | "startsWith" | "endsWith" | "indexOf" | "lastIndexOf"
                    | "lowerAscii" | "upperAscii" | "trim" | "reverse" | "charAt" | "substring" | "@in" => {
                        (1 + scaled(largest), largest)
                    }
                    // Every character may be replaced (an empty pattern matches between all
                    // of them): the text grows by the replacement at each of its positions.
                    "replace" => {
                        let text = sizes.first().copied().unwrap_or(0);
                        let with = sizes.get(2).copied().unwrap_or(0);
                        let size = text.saturating_add(text.saturating_add(1).saturating_mul(with));
                        (1 + scaled(total.saturating_add(size)), size)
                    }
                    // As many elements as the list's size, each as long, with separators
                    // (or arguments) between: `split` then `join` multiplies a text too.
                    "join" | "format" => {
                        let (first, second) = (sizes.first().copied().unwrap_or(0), sizes.get(1).copied().unwrap_or(0));
                        let size = first.saturating_add(largest.saturating_mul(first.saturating_add(second)));
                        (1 + scaled(total.saturating_add(size)), size)
                    }
                    "split" => (1 + scaled(largest), largest.saturating_add(1)),
                    // A regular expression match is linear in the text times the pattern.
                    "matches" => {
                        let pattern = scaled(sizes.last().copied().unwrap_or(0));
                        (scaled(largest).saturating_mul(pattern.saturating_add(1)).saturating_add(1), 1)
                    }
                    _ => (1, largest),
                };
                Estimate { cost: cost.saturating_add(call_cost), size }
            }
            Expr::Comprehension(c) => {
                let range = self.walk(&c.iter_range);
                let init = self.walk(&c.accu_init);
                self.scope.push((c.iter_var.as_str(), DEVICE_VALUE_SIZE));
                if let Some(second) = &c.iter_var2 {
                    self.scope.push((second.as_str(), DEVICE_VALUE_SIZE));
                }
                self.scope.push((c.accu_var.as_str(), range.size));
                let condition = self.walk(&c.loop_cond);
                let step = self.walk(&c.loop_step);
                let result = self.walk(&c.result);
                self.scope.truncate(self.scope.len() - 2 - usize::from(c.iter_var2.is_some()));
                let per_iteration = condition.cost.saturating_add(step.cost).saturating_add(1);
                Estimate {
                    cost: range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(range.size.saturating_mul(per_iteration))
                        .saturating_add(result.cost),
                    // What the steps build (`map`'s elements) may be larger than the range.
                    size: range.size.max(step.size),
                }
            }
        }
    }
}

/// The worst-case cost of `expression`, or what the API server's checker would reject.
pub fn estimate(expression: &Expression) -> Result<u64, Error> {
    let mut walker = Walker { scope: Vec::new(), problem: None, depth: 0 };
    let estimate = walker.walk(expression);
    match walker.problem {
        Some(problem) => Err(problem),
        None => Ok(estimate.cost),
    }
}
