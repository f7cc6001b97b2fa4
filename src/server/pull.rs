//! `/api/pull`: the store's verified, resumable download on a thread of its own, its progress
//! as Ollama's NDJSON (`{"status": "pulling manifest"}`, `{"status": "pulling <name>",
//! "digest", "total", "completed"}`, `{"status": "verifying sha256 digest"}`,
//! `{"status": "success"}`), or `{"error": ...}` as the last line.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::openai::json_response;
use crate::storage::download::{pull, DownloadEvent, DownloadOptions, ReqwestClient};
use crate::storage::FsStore;

/// Progress lines at most this often (the last one always goes).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Download `url` into `store` as `name`, sending progress lines to `tx` (the last one is
/// `success` or an error). Stops early when the receiver is gone (the client left): the
/// verified files stay, and the next pull resumes.
pub fn run(store: FsStore, url: String, name: String, tx: UnboundedSender<Value>) {
    let _ = tx.send(json!({ "status": "pulling manifest" }));
    let client = match ReqwestClient::new() {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.send(json!({ "error": e.message }));
            return;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(json!({ "error": format!("cannot start a runtime: {e}") }));
            return;
        }
    };
    let last = Mutex::new(Instant::now() - PROGRESS_EVERY);
    let status = format!("pulling {name}");
    let digest = format!("url:{url}");
    let events = |e: &DownloadEvent| {
        if let DownloadEvent::Progress(p) = e {
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= PROGRESS_EVERY || (p.total > 0 && p.done >= p.total) {
                *last = Instant::now();
                let _ = tx.send(json!({
                    "status": status,
                    "digest": digest,
                    "total": p.total,
                    "completed": p.done,
                }));
            }
        }
    };
    let options = DownloadOptions::default();
    let outcome = runtime.block_on(async {
        let download = pull(&store, &client, &url, &name, None, &options, &events);
        tokio::select! {
            r = download => Some(r),
            () = tx.closed() => None,
        }
    });
    match outcome {
        None => {}
        Some(Ok(summary)) => {
            let _ = tx.send(json!({ "status": "verifying sha256 digest" }));
            let _ = tx.send(json!({ "status": "writing manifest" }));
            let _ = tx.send(json!({
                "status": "success",
                "name": summary.name,
                "bytes": summary.bytes,
                "already_present": summary.already_present,
            }));
        }
        Some(Err(e)) => {
            let _ = tx.send(json!({ "error": e.to_string() }));
        }
    }
}

/// The response: every line as NDJSON, or with `stream: false` the last one alone (an error
/// as 500).
pub async fn respond(mut rx: UnboundedReceiver<Value>, stream: bool) -> Response {
    if !stream {
        let mut last = json!({ "error": "the download ended without a result" });
        while let Some(v) = rx.recv().await {
            last = v;
        }
        let status = if last.get("error").is_some() {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::OK
        };
        return json_response(status, &last);
    }
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        let v = rx.recv().await?;
        Some((
            Ok::<_, std::convert::Infallible>(Bytes::from(format!("{v}\n"))),
            rx,
        ))
    });
    let mut r = Response::new(axum::body::Body::from_stream(lines));
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/x-ndjson"),
    );
    r
}
