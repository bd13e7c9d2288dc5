//! The chat page at `GET /` (`--no-webui` turns it off): three static files checked in under
//! `webui/` and compiled into the binary, no build step and nothing fetched from elsewhere. The
//! page itself is public; what it asks of the API carries the key the user types.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("webui/index.html");
const SCRIPT: &str = include_str!("webui/app.js");
const STYLE: &str = include_str!("webui/style.css");

/// The page's paths (served without a key, also while the model loads).
pub const PATHS: &[&str] = &["/", "/webui/app.js", "/webui/style.css"];

/// Only the page's own files and API: no inline script, nothing from another origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `router` with the page's routes.
pub fn routes<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .route(
            "/",
            get(|| async { file(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/webui/app.js",
            get(|| async { file(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/webui/style.css",
            get(|| async { file(STYLE, "text/css; charset=utf-8") }),
        )
}

fn file(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
