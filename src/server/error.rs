//! The errors the server answers with, in each API's own shape: OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` and Ollama's `{"error": "..."}`.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Which API a route belongs to (the error shape it answers with).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Api {
    OpenAi,
    Ollama,
}

/// An error answered to a client: its status, OpenAI `type`, `param` and `code`, and the message.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `server_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    pub message: String,
    /// Seconds a client should wait before trying again (503 while the queue is full).
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            param: None,
            code: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: a request the server cannot take as sent.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 about one field of the request.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::invalid(message)
        }
    }

    /// 404: no such model.
    pub fn model_not_found(name: &str, why: impl std::fmt::Display) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model `{name}` does not exist: {why}"),
            )
        }
    }

    /// 400: the prompt (with the tokens asked for) does not fit the model's context.
    pub fn context_length(message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some("messages".into()),
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(message)
        }
    }

    /// 401: no key or a wrong one.
    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "a valid API key is required: send `Authorization: Bearer <key>`",
            )
        }
    }

    /// 413: the request body is over the limit.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    /// 503 with Retry-After: the model's queue is full.
    pub fn busy(model: &str, waiting: usize) -> ApiError {
        ApiError {
            retry_after: Some(1),
            code: Some("queue_full"),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                format!(
                    "the model `{model}` has {waiting} requests waiting, the most the server \
                     queues (--max-queue); try again shortly"
                ),
            )
        }
    }

    /// 503: the server is shutting down.
    pub fn shutting_down() -> ApiError {
        ApiError {
            retry_after: Some(5),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the server is shutting down",
            )
        }
    }

    /// 503: loading `model` needs models unloaded that are all busy (`why`: which limit).
    pub fn models_busy(model: &str, why: &str) -> ApiError {
        ApiError {
            retry_after: Some(5),
            code: Some("models_busy"),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                format!("cannot load `{model}` now: {why} and all of them are busy; retry later"),
            )
        }
    }

    /// 507: `model` alone takes more than the memory limit.
    pub fn over_memory(model: &str, bytes: u64, limit: u64) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_too_large"),
            ..ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "server_error",
                format!(
                    "the model `{model}` takes about {bytes} bytes, more than the server's \
                     memory limit of {limit} bytes (--max-memory)"
                ),
            )
        }
    }

    /// 500: the model failed to load or generate.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// 404 for a path the server does not have.
    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no such endpoint: {path}"),
        )
    }

    /// The error as JSON in `api`'s shape (also what a stream's last event carries).
    pub fn body(&self, api: Api) -> serde_json::Value {
        match api {
            Api::OpenAi => serde_json::json!({
                "error": {
                    "message": self.message,
                    "type": self.kind,
                    "param": self.param,
                    "code": self.code,
                }
            }),
            Api::Ollama => serde_json::json!({ "error": self.message }),
        }
    }

    /// The HTTP response in `api`'s shape.
    pub fn response(&self, api: Api) -> Response {
        let mut response = Response::new(Body::from(self.body(api).to_string()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// An [`ApiError`] of a known API, as an axum response.
pub struct Answer(pub Api, pub ApiError);

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        self.1.response(self.0)
    }
}
