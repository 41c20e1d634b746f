//! Where the scheduling loop leaves its latest view for the page: swapped whole under a
//! lock held only for the swap or the clone of an `Arc`, so a request never holds up a
//! cycle and a cycle never waits on a slow browser.

use std::sync::{Arc, Mutex};

use super::render;
use super::view::UiView;

/// The latest view, or none yet (starting, or a replica that does not lead).
#[derive(Default)]
pub struct Board {
    latest: Mutex<Option<Arc<UiView>>>,
}

impl Board {
    pub fn publish(&self, view: UiView) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(view));
    }

    /// Forgets the view: this replica stopped leading, and its figures would go stale.
    pub fn clear(&self) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    pub fn latest(&self) -> Option<Arc<UiView>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl crate::metrics::Page for Board {
    fn html(&self) -> String {
        match self.latest() {
            Some(view) => render::page(&view),
            None => render::not_yet(),
        }
    }
}
