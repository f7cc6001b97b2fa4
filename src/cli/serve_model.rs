//! `tritium serve-model <rdrr-dir | model.gguf> --port N [--host 127.0.0.1]`: serve a model
//! folder over HTTP for `tritium pull` and browsers.
//!
//! - Only regular files inside the folder are served, judged after every symlink on the way is
//!   resolved: symlinks (to files or folders) that stay inside are followed; one that leads
//!   out, a folder, a FIFO, a socket or a device gets 404, as a missing file does.
//! - The files through tower-http's `ServeFile`: `HEAD`, `Last-Modified` and
//!   `If-Modified-Since`, content types from the requested name (`application/json` for
//!   `.json`, `application/octet-stream` for shards).
//! - `Range` as RFC 9110 §14 has it, parsed by
//!   [`range_response`](crate::storage::download::range_response): one satisfiable byte range
//!   gets 206 with `Content-Range`, one that selects no byte 416 with `Content-Range: bytes
//!   */<len>`; a header not understood (invalid syntax, another unit) is ignored, and so are
//!   several ranges (200 with the whole file: see `range_response` for why not
//!   `multipart/byteranges`). Ranges apply to `GET` only.
//! - A strong `ETag` per file (`"<size>-<mtime ns>"`, both hex: it changes whenever the file
//!   does), with `If-None-Match` (304; it overrules `If-Modified-Since`) and `If-Range` (the
//!   range is served only while the validator still matches; a date validator or a stale ETag
//!   gets the whole file).
//! - CORS for any origin: `Access-Control-Allow-Origin: *`, `Content-Range`, `Content-Length`,
//!   `ETag` and `Accept-Ranges` exposed to scripts, `OPTIONS` preflights answered.
//! - Paths are checked before any file is touched: `..`, `.`, backslashes, NUL and
//!   percent-encoded forms of them (`%2e%2e`, `%2f`) get 400.
//! - Connections are bounded (`connections`): a header timeout (`--header-timeout`, 10 s), an
//!   idle timeout between requests (`--idle-timeout`, 5 s), a send timeout for clients that
//!   stop reading (`--send-timeout`, 60 s), and at most `--max-connections` (256) at once,
//!   further clients waiting their turn.
//!
//! Given a GGUF file, the model is first converted to RDRR in `<store>/converted/<name>-<key>`,
//! where the key hashes the file's path, size and modification time: an unchanged GGUF reuses
//! its earlier conversion.

pub(super) mod connections;

use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use clap::Args;
use sha2::{Digest, Sha256};
use tower_http::cors::{Any, CorsLayer};
use tower_http::services::ServeFile;

use super::convert::gguf_to_rdrr;
use super::model::{open, OpenModel};
use crate::cli::Error;
use crate::formats::rdrr::{ConvertOptions, MANIFEST_FILE};
use crate::formats::source::ModelFiles;
use crate::storage::download::{range_response, RangeResponse};

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
    /// Seconds a request's header may take to arrive, counted from when its connection is
    /// ready for it (just accepted, or its previous response sent); then the connection is
    /// closed. Cuts off clients that send their header slowly or not at all.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_seconds)]
    pub header_timeout: Duration,
    /// Seconds a connection with no request in progress may go without a byte arriving (an
    /// idle keep-alive connection, or one opened and never used) before it is closed.
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_seconds)]
    pub idle_timeout: Duration,
    /// Seconds a response may go without the server being able to write a byte of it (the
    /// client has stopped reading and the socket buffers are full) before its connection is
    /// closed.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_seconds)]
    pub send_timeout: Duration,
    /// Connections served at once; further clients wait, connected but unanswered, until one
    /// closes.
    #[arg(long, value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    #[command(flatten)]
    pub store: super::store::StoreArgs,
}

/// The longest timeout accepted: a day (a deadline must stay a representable instant).
const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// A timeout in seconds (fractions allowed), more than 0 and at most a day.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= MAX_TIMEOUT_SECS) {
        return Err(format!(
            "{s} s: a timeout must be more than 0 and at most {MAX_TIMEOUT_SECS} s"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
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
    /// The served folder with every symlink resolved: a file whose resolved path lies under it
    /// is inside the folder.
    root: PathBuf,
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

/// A file that may be served: its path with every symlink resolved, and its metadata.
struct Servable {
    path: PathBuf,
    meta: Metadata,
}

/// `rel` under `root` (canonical), if it is a regular file inside the folder once every
/// symlink on the way is resolved: a symlink, or a symlinked folder, that leads out of the
/// folder is refused, and so is anything that is not a regular file (folders, FIFOs, sockets,
/// devices: a FIFO would block the reader until some writer opened it). Symlinks that stay
/// inside the folder are followed. Whoever can write to the folder is trusted: a symlink
/// swapped in between this check and the file's opening is not guarded against.
fn servable(root: &Path, rel: &str) -> Option<Servable> {
    let path = root.join(rel).canonicalize().ok()?;
    if !path.starts_with(root) {
        return None;
    }
    let meta = std::fs::metadata(&path).ok()?;
    meta.is_file().then_some(Servable { path, meta })
}

/// The strong validator of a file: its size and modification time.
fn etag_of(meta: &Metadata) -> Option<String> {
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

/// How to answer the request's `Range` for a file of `len` bytes (RFC 9110 §14.2, see
/// [`range_response`]): ranges apply to `GET` only, and a request with more than one `Range`
/// field, or one that is not visible ASCII, is not understood and gets the whole file.
fn requested_range(req: &Request, len: u64) -> RangeResponse {
    let mut fields = req.headers().get_all(header::RANGE).iter();
    match (req.method(), fields.next(), fields.next()) {
        (&Method::GET, Some(value), None) => value
            .to_str()
            .map_or(RangeResponse::Full, |v| range_response(v, len)),
        _ => RangeResponse::Full,
    }
}

fn status_only(status: StatusCode, message: &'static str) -> Response {
    (status, message).into_response()
}

async fn handle(State(served): State<Arc<Served>>, mut req: Request) -> Response {
    let Some(rel) = safe_relative_path(req.uri().path()) else {
        return status_only(StatusCode::BAD_REQUEST, "path outside the model folder\n");
    };
    let root = served.root.clone();
    let name = rel.clone();
    // Resolving symlinks and reading metadata block: off the async workers.
    let file = tokio::task::spawn_blocking(move || servable(&root, &name))
        .await
        .ok()
        .flatten();
    let Some(file) = file else {
        return status_only(StatusCode::NOT_FOUND, "not found\n");
    };
    let len = file.meta.len();
    let etag = etag_of(&file.meta);
    if let Some(tag) = &etag {
        let read = matches!(*req.method(), Method::GET | Method::HEAD);
        if read && none_match(req.headers(), tag) {
            return Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .header(header::ETAG, tag.as_str())
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
    }
    let headers = req.headers_mut();
    // If-None-Match decides alone (RFC 9110 §13.1.3): a date must not turn its 200 into a 304.
    if headers.contains_key(header::IF_NONE_MATCH) {
        headers.remove(header::IF_MODIFIED_SINCE);
    }
    // If-Range: keep the range only while the strong validator still matches (a date, a stale
    // tag, or a file without a validator gets the whole file).
    if let Some(validator) = headers.get(header::IF_RANGE) {
        if etag.as_deref().map(str::as_bytes) != Some(validator.as_bytes()) {
            headers.remove(header::RANGE);
        }
    }
    match requested_range(&req, len) {
        RangeResponse::Full => {
            req.headers_mut().remove(header::RANGE);
        }
        // The range as tower-http reads it, with the bounds resolved here (digits always make
        // a header value; were it refused, the whole file would be the answer).
        RangeResponse::Partial { first, last } => {
            match HeaderValue::from_str(&format!("bytes={first}-{last}")) {
                Ok(v) => req.headers_mut().insert(header::RANGE, v),
                Err(_) => req.headers_mut().remove(header::RANGE),
            };
        }
        RangeResponse::Unsatisfiable => {
            let mut response = Response::builder()
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                .header(header::ACCEPT_RANGES, "bytes");
            if let Some(tag) = &etag {
                response = response.header(header::ETAG, tag.as_str());
            }
            return response
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        }
    }
    // The content type follows the requested name (a symlink's target may be named otherwise).
    let mime = mime_guess::from_path(&rel).first_or_octet_stream();
    let mut files = ServeFile::new_with_mime(&file.path, &mime).with_buf_chunk_size(CHUNK);
    let mut response = match files.try_call(req).await {
        Ok(r) => r.map(Body::new),
        Err(e) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response();
        }
    };
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

/// The service: the files of `root` (canonical) with ETags, behind CORS.
fn router(root: PathBuf) -> Router {
    let served = Arc::new(Served { root });
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
    let folder = folder_to_serve(args)?;
    let root = folder.canonicalize().map_err(|e| io_error(&folder, e))?;
    let limits = connections::Limits {
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        send_timeout: args.send_timeout,
        max_connections: args.max_connections as usize,
    };
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
            folder.display(),
            local.port(),
            local.port()
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        connections::serve(listener, router(root), limits, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
        Ok::<_, Error>(())
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

    #[test]
    fn timeouts_are_positive_seconds_up_to_a_day() {
        assert_eq!(parse_seconds("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_seconds("86400"), Ok(Duration::from_secs(86_400)));
        for bad in ["0", "-1", "86401", "1e30", "nan", "inf", "", "10s", "abc"] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }
}
