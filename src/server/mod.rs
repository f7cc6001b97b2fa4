//! `tritium serve`: an OpenAI- and Ollama-compatible HTTP server over the engine.
//!
//! - axum on tokio, on the bounded connections of `serve-model` (header, idle and send
//!   timeouts, a connection limit, graceful shutdown).
//! - Each loaded model runs on a thread of its own with a bounded FIFO queue ([`models`]);
//!   the async runtime only moves bytes.
//! - Routes: OpenAI's ([`openai`]), Ollama's ([`ollama`]), `GET /health` and `GET /metrics`
//!   ([`metrics`]).
//! - A bearer key, compared in constant time, on every route but `/health`; CORS preflights
//!   are answered before the key is checked (browsers send none on `OPTIONS`).
//! - SIGTERM or Ctrl-C: stop accepting, let requests in flight finish up to a deadline, exit 0.

pub mod details;
pub mod error;
mod generation;
pub mod metrics;
pub mod models;
mod ollama;
mod openai;
mod pull;
mod request;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::Router;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower_http::cors::{AllowOrigin, CorsLayer};

use error::{Api, ApiError};
pub use generation::Event;

/// Ollama's `keep_alive` value (a duration string or seconds) as a keep-alive.
pub fn ollama_keep_alive(v: &serde_json::Value) -> Result<models::KeepAlive, ApiError> {
    Ok(ollama::keep_alive(Some(v))?.unwrap_or(models::KeepAlive::Forever))
}
use metrics::Metrics;
use models::Registry;

/// What every handler shares.
pub struct App {
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    /// SHA-256 of the API key (compared in constant time), when one is required.
    key_hash: Option<[u8; 32]>,
    /// Largest request body, in bytes.
    pub body_limit: usize,
}

/// `system_fingerprint` of OpenAI responses: this build.
pub fn fingerprint() -> &'static str {
    concat!("tritium-", env!("CARGO_PKG_VERSION"))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Whether `headers` carry the key (`Authorization: Bearer <key>`). The hashes are compared,
/// so neither the key's bytes nor its length shape the time taken.
fn authorized(key_hash: &[u8; 32], headers: &axum::http::HeaderMap) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    match given {
        Some(token) => bool::from(sha256(token.as_bytes()).ct_eq(key_hash)),
        None => false,
    }
}

/// Which API's error shape a path answers with.
fn api_of(path: &str) -> Api {
    if path.starts_with("/api/") {
        Api::Ollama
    } else {
        Api::OpenAi
    }
}

async fn auth(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(hash) = &app.key_hash {
        if req.uri().path() != "/health" && !authorized(hash, req.headers()) {
            return ApiError::unauthorized().response(api_of(req.uri().path()));
        }
    }
    next.run(req).await
}

/// The routes, for the request counter's label (a raw path would let clients grow the label
/// set without bound).
const ROUTES: [&str; 16] = [
    "/health",
    "/metrics",
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/api/generate",
    "/api/chat",
    "/api/tags",
    "/api/show",
    "/api/ps",
    "/api/version",
    "/api/delete",
    "/api/pull",
    "/",
    "/api",
    "/v1",
];

async fn count(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let route = match ROUTES.iter().find(|r| **r == path) {
        Some(r) => *r,
        None if path.starts_with("/v1/models/") => "/v1/models/{id}",
        None => "other",
    };
    let method = req.method().clone();
    let response = next.run(req).await;
    app.metrics
        .request(method.as_str(), route, response.status().as_u16());
    response
}

async fn health() -> Response {
    openai::json_response(StatusCode::OK, &serde_json::json!({ "status": "ok" }))
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    let text = app.metrics.render(&app.registry.gauges());
    let mut r = Response::new(Body::from(text));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// `GET /lora-adapters` (llama-server's): the `--lora` adapters, `[{ id, path, scale }]`, the
/// ids a request's `lora` field names.
async fn lora_adapters(State(app): State<Arc<App>>) -> Response {
    let list: Vec<serde_json::Value> = app
        .registry
        .config
        .lora
        .iter()
        .enumerate()
        .map(|(id, (path, scale))| {
            serde_json::json!({ "id": id, "path": path.display().to_string(), "scale": scale })
        })
        .collect();
    openai::json_response(StatusCode::OK, &serde_json::Value::Array(list))
}

async fn root() -> Response {
    openai::json_response(
        StatusCode::OK,
        &serde_json::json!({ "name": "tritium", "version": env!("CARGO_PKG_VERSION") }),
    )
}

async fn fallback(req: Request) -> Response {
    ApiError::no_route(req.uri().path()).response(api_of(req.uri().path()))
}

/// The router: routes, then the key check, then CORS (preflights never reach the key check),
/// then the request counter.
pub fn router(app: Arc<App>, cors_origins: &[String]) -> Router {
    let origins = if cors_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            cors_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    let cors = CorsLayer::new()
        .allow_origin(origins)
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .max_age(Duration::from_secs(3600));
    Router::new()
        .route("/", get(root))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/models", get(openai::list_models))
        .route("/v1/models/{id}", get(openai::get_model))
        .route("/lora-adapters", get(lora_adapters))
        .route("/api/generate", post(ollama::generate))
        .route("/api/chat", post(ollama::chat))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/ps", get(ollama::ps))
        .route("/api/version", get(ollama::version))
        .route("/api/delete", delete(ollama::delete))
        .route("/api/pull", post(ollama::pull))
        .fallback(fallback)
        .layer(middleware::from_fn_with_state(Arc::clone(&app), auth))
        .layer(cors)
        .layer(middleware::from_fn_with_state(Arc::clone(&app), count))
        .with_state(app)
}

/// A model the server can name: given at start, or in the store.
pub struct KnownModel {
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
    /// Modification time, seconds since the epoch.
    pub modified: u64,
    pub details: Option<details::ModelDetails>,
}

/// Every model a request may name: those given at start, then the store's.
pub async fn known_models(app: &App) -> Result<Vec<KnownModel>, ApiError> {
    let named: BTreeMap<String, PathBuf> = app.registry.named().clone();
    let store = app.registry.store()?;
    tokio::task::spawn_blocking(move || {
        use crate::storage::ShardStore;
        let stored = pollster::block_on(store.list()).unwrap_or_default();
        let mut out = Vec::new();
        let mut add = |name: String, path: PathBuf, bytes: Option<u64>| {
            let meta = std::fs::metadata(&path).ok();
            let modified = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            let bytes = bytes.unwrap_or_else(|| meta.map_or(0, |m| m.len()));
            let details = details::describe(&path).ok();
            out.push(KnownModel {
                name,
                path,
                bytes,
                modified,
                details,
            });
        };
        for (name, path) in named.iter() {
            add(name.clone(), path.clone(), None);
        }
        for m in stored {
            if named.contains_key(&m.name) {
                continue;
            }
            if let Some(path) = store.complete_path(&m.name) {
                add(m.name, path, Some(m.bytes));
            }
        }
        out
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))
}

/// Build the shared state.
pub fn app(
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    api_key: Option<&str>,
    body_limit: usize,
) -> Arc<App> {
    Arc::new(App {
        registry,
        metrics,
        key_hash: api_key.map(|k| sha256(k.as_bytes())),
        body_limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_checked_as_a_bearer_token() {
        let hash = sha256(b"s3cret");
        let headers = |v: &str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            h
        };
        assert!(authorized(&hash, &headers("Bearer s3cret")));
        assert!(authorized(&hash, &headers("bearer  s3cret ")));
        assert!(!authorized(&hash, &headers("Bearer s3cre")));
        assert!(!authorized(&hash, &headers("Basic s3cret")));
        assert!(!authorized(&hash, &headers("s3cret")));
        assert!(!authorized(&hash, &axum::http::HeaderMap::new()));
    }
}
