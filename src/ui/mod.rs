//! The scheduler's read-only web page, served at `/ui` on the metrics port.
//!
//! ```text
//!  scheduling loop ──housekeeping──► ui::build::build   ──publish──► Board (latest UiView)
//!                                                                       │ on GET /ui
//!  browser ◄── HTML, inline SVG, meta refresh ◄── render::page ◄────────┘
//! ```
//!
//! The loop publishes an immutable [`UiView`] after its housekeeping pass, from figures it
//! computed anyway; a request renders the latest one. Serving the page reads no API server
//! and writes nothing. This module knows no Kubernetes types: the view is plain data.

mod board;
pub mod build;
pub mod render;
pub mod view;

pub use board::Board;
pub use view::UiView;
