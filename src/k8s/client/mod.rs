//! The client every request goes through: a deadline on each one-shot request and one
//! classifier of what is worth retrying ([`request`]), and the client-side rate limits
//! ([`throttle`]).

pub mod request;
pub mod throttle;
