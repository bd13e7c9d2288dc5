//! API errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the
//! HTTP status each kind maps to. Every refusal of the server goes through [`ApiError`], so a
//! client always gets JSON it can parse and a message naming the offending field and value.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// One API error.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, …
    pub kind: &'static str,
    pub message: String,
    /// The request field at fault.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: String) -> ApiError {
        ApiError {
            status,
            kind,
            message,
            param: None,
            code: None,
        }
    }

    /// 400: a request field is missing, of the wrong type or out of bounds.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                message.into(),
            )
        }
    }

    /// 400 about the body as a whole (not JSON, not UTF-8, nested too deep).
    pub fn bad_body(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            message.into(),
        )
    }

    /// 401: no key, or not one of the server's keys.
    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid or missing API key: send `Authorization: Bearer KEY` or `X-Api-Key: KEY`"
                    .into(),
            )
        }
    }

    /// 403: a keyless server refuses a request's `Host` (DNS rebinding).
    pub fn foreign_host(host: &str) -> ApiError {
        ApiError {
            code: Some("host_not_allowed"),
            ..ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                format!(
                    "Host {host:?} is not a loopback name or the server's address: pass \
                     --allowed-hosts {host} (or set --api-key) to serve it"
                ),
            )
        }
    }

    /// 415: a keyless server takes POST bodies as `application/json` only (a web page's form
    /// post cannot send that without a CORS preflight).
    pub fn not_json(given: &str) -> ApiError {
        ApiError {
            code: Some("unsupported_media_type"),
            ..ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                format!(
                    "Content-Type {given:?}: send the body as `Content-Type: application/json` \
                     (or set --api-key, or --allowed-hosts '*')"
                ),
            )
        }
    }

    /// 413: the body is over the limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            code: Some("request_too_large"),
            ..ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!("the request body is over {limit} bytes"),
            )
        }
    }

    /// 429: every slot is busy and the pending queue is full.
    pub fn busy(slots: usize, queue: usize) -> ApiError {
        ApiError {
            code: Some("server_busy"),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                format!("all {slots} slots are busy and {queue} requests are already waiting: retry later"),
            )
        }
    }

    /// 408: the body did not arrive within the body deadline.
    pub fn body_timeout(deadline: std::time::Duration) -> ApiError {
        ApiError {
            code: Some("request_timeout"),
            ..ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                format!(
                    "the request body did not arrive within {} s",
                    deadline.as_secs()
                ),
            )
        }
    }

    /// 503: the request waited for a slot longer than the queue deadline (retry later).
    pub fn queue_timeout(deadline: std::time::Duration) -> ApiError {
        ApiError {
            code: Some("queue_timeout"),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                format!(
                    "no slot was free within {} s (--timeout): retry later",
                    deadline.as_secs()
                ),
            )
        }
    }

    /// 503: loading, shutting down, or the device was lost.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            message.into(),
        )
    }

    /// 404: no such route.
    pub fn not_found(path: &str) -> ApiError {
        ApiError {
            code: Some("not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("no route {path}"),
            )
        }
    }

    /// 405: the route exists with another method.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this route".into(),
        )
    }

    /// 500: the engine failed (the message says how).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            message.into(),
        )
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        // Refusals worth retrying say when.
        if matches!(self.code, Some("queue_timeout" | "server_busy")) {
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        r
    }
}
