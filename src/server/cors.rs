//! CORS for browser front-ends (`serve --cors-origin ORIGIN`, repeatable or comma-separated,
//! `*` for any origin): tower-http's `CorsLayer` answers preflight `OPTIONS` requests (before
//! the key gate: a browser sends no key on a preflight) and adds
//! `Access-Control-Allow-Origin` to every answer to an allowed origin, errors included. Without
//! the flag no CORS header is sent, so browsers keep pages of other origins out.

use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::{Error, Result};

/// The layer for `origins` (`None` when there are none).
pub fn layer(origins: &[String]) -> Result<Option<CorsLayer>> {
    let origins: Vec<&str> = origins
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .collect();
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.contains(&"*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim_end_matches('/')).map_err(|e| {
                    Error::Usage(format!("--cors-origin {o:?} is not a header value: {e}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        AllowOrigin::list(list)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(AllowHeaders::list([
                HeaderName::from_static("authorization"),
                HeaderName::from_static("content-type"),
                HeaderName::from_static("x-api-key"),
            ]))
            .max_age(std::time::Duration::from_secs(600)),
    ))
}
