//! The HTTP door's paths as the router is given them: [`Routes`] puts each route on the router
//! and remembers its path, so that [`super::paths`] lists exactly what is served. The decision
//! matrix (`tests/e2e/auth/policy/decision_matrix.rs`) enumerates them: a route without a row fails it.

use axum::Router;
use axum::routing::MethodRouter;

/// A router that remembers the path of every route put on it.
pub(crate) struct Routes<S> {
    pub(super) router: Router<S>,
    pub(super) paths: Vec<String>,
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    pub(super) fn new() -> Self {
        Routes {
            router: Router::new(),
            paths: vec![],
        }
    }

    /// Serves `path` with `methods` (as [`Router::route`]), and remembers it.
    pub(super) fn route(mut self, path: &str, methods: MethodRouter<S>) -> Self {
        self.router = self.router.route(path, methods);
        self.paths.push(path.to_string());
        self
    }
}
