//! `tritium serve-model <rdrr-dir | model.gguf> --port N [--host 127.0.0.1]`: serve a model
//! folder over HTTP for `tritium pull` and browsers.
//!
//! - Static files of the folder through tower-http's `ServeDir`: `Range` (206 with
//!   `Content-Range`, 416 for a range that cannot be satisfied), `HEAD`, `Last-Modified`,
//!   content types from the file name (`application/json` for `.json`,
//!   `application/octet-stream` for shards).
//! - A strong `ETag` per file (`"<size>-<mtime ns>"`, both hex: it changes whenever the file
//!   does), with `If-None-Match` (304) and `If-Range` (the range is served only while the
//!   validator still matches; a date validator or a stale ETag gets the whole file).
//! - CORS for any origin: `Access-Control-Allow-Origin: *`, `Content-Range`, `Content-Length`,
//!   `ETag` and `Accept-Ranges` exposed to scripts, `OPTIONS` preflights answered.
//! - Paths are checked before any file is touched: `..`, `.`, backslashes, NUL and
//!   percent-encoded forms of them (`%2e%2e`, `%2f`) get 400.
//!
//! Given a GGUF file, the model is first converted to RDRR in `<store>/converted/<name>-<key>`,
//! where the key hashes the file's path, size and modification time: an unchanged GGUF reuses
//! its earlier conversion.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt as _;
use axum::Router;
use clap::Args;
use sha2::{Digest, Sha256};
use tower_http::cors::{Any, CorsLayer};
use tower_http::services::ServeDir;

use super::convert::gguf_to_rdrr;
use super::model::{open, OpenModel};
use crate::cli::Error;
use crate::formats::rdrr::{ConvertOptions, MANIFEST_FILE};
use crate::formats::source::ModelFiles;

/// `tritium serve-model` arguments.
#[derive(Args, Clone, Debug)]
pub struct ServeModelArgs {
    /// An RDRR folder, or a GGUF file (converted to RDRR first, once).
    pub model: PathBuf,
    /// The port; 0 picks a free one (printed).
    #[arg(long, default_value_t = 8765)]
    pub port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[command(flatten)]
    pub store: super::store::StoreArgs,
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The folder to serve: the RDRR folder itself, or the conversion of a GGUF file (made now,
/// or reused when the GGUF is unchanged).
fn folder_to_serve(args: &ServeModelArgs) -> Result<PathBuf, Error> {
    let path = &args.model;
    match open(path)? {
        OpenModel::Rdrr { .. } => Ok(path.clone()),
        OpenModel::Gguf {
            files,
            file,
            header: gguf,
        } => {
            let root = crate::storage::store_root(args.store.store.as_deref())?;
            let dir = root.join("converted").join(conversion_name(path)?);
            if dir.join(MANIFEST_FILE).is_file() {
                eprintln!(
                    "reusing the conversion of {} in {}",
                    path.display(),
                    dir.display()
                );
                return Ok(dir);
            }
            eprintln!("converting {} to RDRR in {}", path.display(), dir.display());
            let stem = path
                .file_stem()
                .map_or("model".into(), |s| s.to_string_lossy().into_owned());
            gguf_to_rdrr(
                &*ModelFiles::open(&files, &file)?,
                &gguf,
                &dir,
                &ConvertOptions::new(stem),
            )?;
            Ok(dir)
        }
        OpenModel::Trellis { .. } => Err(Error::Usage(format!(
            "{}: serve-model serves RDRR folders and GGUF files",
            path.display()
        ))),
    }
}

/// `<file stem>-<16 hex digits of SHA-256(canonical path, size, mtime)>`.
fn conversion_name(path: &Path) -> Result<String, Error> {
    let canonical = path.canonicalize().map_err(|e| io_error(path, e))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| io_error(path, e))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let mut h = Sha256::new();
    h.update(canonical.to_string_lossy().as_bytes());
    h.update(meta.len().to_le_bytes());
    h.update(mtime.to_le_bytes());
    let stem: String = path
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy().into_owned())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok(format!("{stem}-{}", &hex::encode(h.finalize())[..16]))
}

/// What every request handler shares.
struct Served {
    root: PathBuf,
    files: ServeDir,
}

/// Bytes per file read (tower-http reads 64 KiB by default, each read a hop to a blocking
/// thread and back: that per-read work competed with the browser for a small machine's cores).
const CHUNK: usize = 1 << 20;

/// The request path as a relative file path, or `None` when it could leave the folder.
fn safe_relative_path(uri_path: &str) -> Option<String> {
    let decoded = percent_encoding::percent_decode_str(uri_path)
        .decode_utf8()
        .ok()?;
    let rel = decoded.strip_prefix('/')?;
    if rel.is_empty() {
        return Some(String::new());
    }
    let bad = rel.contains('\\')
        || rel.contains('\0')
        || rel.contains(':')
        || rel
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    (!bad).then(|| rel.to_string())
}

/// The strong validator of a file: its size and modification time.
fn etag_of(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!("\"{:x}-{:x}\"", meta.len(), mtime))
}

/// `If-None-Match` (weak comparison, `*` matches any).
fn none_match(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
}

async fn handle(State(served): State<Arc<Served>>, mut req: Request) -> Response {
    let Some(rel) = safe_relative_path(req.uri().path()) else {
        return (StatusCode::BAD_REQUEST, "path outside the model folder\n").into_response();
    };
    let etag = if rel.is_empty() {
        None
    } else {
        etag_of(&served.root.join(&rel))
    };
    if let Some(tag) = &etag {
        let read = matches!(*req.method(), Method::GET | Method::HEAD);
        if read && none_match(req.headers(), tag) {
            return Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .header(header::ETAG, tag.as_str())
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
        // If-Range: keep the range only while the strong validator still matches.
        if let Some(validator) = req.headers().get(header::IF_RANGE) {
            if validator.as_bytes() != tag.as_bytes() {
                req.headers_mut().remove(header::RANGE);
            }
        }
    } else {
        // Without a validator (not a file), a conditional range cannot be honoured.
        if req.headers().contains_key(header::IF_RANGE) {
            req.headers_mut().remove(header::RANGE);
        }
    }
    let mut files = served.files.clone();
    let response = match files.try_call(req).await {
        Ok(r) => r.map(Body::new),
        Err(e) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response();
        }
    };
    let mut response = response;
    if let Some(tag) = etag {
        if response.status().is_success() || response.status() == StatusCode::RANGE_NOT_SATISFIABLE
        {
            if let Ok(v) = HeaderValue::from_str(&tag) {
                response.headers_mut().insert(header::ETAG, v);
            }
        }
    }
    response
}

/// The service: files of `root` with ETags, behind CORS.
pub fn router(root: PathBuf) -> Router {
    let served = Arc::new(Served {
        files: ServeDir::new(&root)
            .append_index_html_on_directories(false)
            .with_buf_chunk_size(CHUNK),
        root,
    });
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::HEAD, Method::OPTIONS])
        .allow_headers([
            header::RANGE,
            header::IF_NONE_MATCH,
            header::IF_RANGE,
            header::IF_MODIFIED_SINCE,
        ])
        .expose_headers([
            header::CONTENT_RANGE,
            header::CONTENT_LENGTH,
            header::ETAG,
            header::ACCEPT_RANGES,
        ])
        .max_age(std::time::Duration::from_secs(3600));
    Router::new()
        .fallback(handle)
        .with_state(served)
        .layer(cors)
}

/// `tritium serve-model`.
pub fn run(args: &ServeModelArgs) -> Result<ExitCode, Error> {
    let root = folder_to_serve(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Usage(format!("cannot start the server runtime: {e}")))?;
    runtime.block_on(async {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| Error::Usage(format!("cannot listen on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Usage(format!("{addr}: {e}")))?;
        let host = if local.is_ipv6() {
            format!("[{}]", local.ip())
        } else {
            local.ip().to_string()
        };
        println!(
            "serving {} at http://{host}:{}/ (manifest: http://{host}:{}/{MANIFEST_FILE})",
            root.display(),
            local.port(),
            local.port()
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        // TCP_NODELAY: a response's head and body go out in separate writes, and with
        // Nagle's algorithm the body of a small file waits for the head's acknowledgement,
        // which a client on a kept-alive connection delays by up to 40 ms (`tritium pull`
        // spent 45-50 ms of a 0.19 s download on its four small files that way).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router(root.clone()))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| Error::Usage(format!("server: {e}")))
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_could_leave_the_folder_are_refused() {
        for bad in [
            "/../x",
            "/%2e%2e/x",
            "/%2E%2E%2fx",
            "/a/../../x",
            "/a/./b",
            "/a//b",
            "/..%5cx",
            "/%00",
            "/c:x",
            "/%ff",
        ] {
            assert_eq!(safe_relative_path(bad), None, "{bad}");
        }
        assert_eq!(
            safe_relative_path("/shard_00000.bin").as_deref(),
            Some("shard_00000.bin")
        );
        assert_eq!(safe_relative_path("/").as_deref(), Some(""));
        assert_eq!(
            safe_relative_path("/a%20b.json").as_deref(),
            Some("a b.json")
        );
    }
}
