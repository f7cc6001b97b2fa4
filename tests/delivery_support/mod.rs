//! A static file server on loopback that misbehaves on purpose, and small RDRR models to serve.
//! Shared by the delivery tests.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use tritium::formats::rdrr::{RdrrWriter, WriterOptions};
use tritium::formats::source::MemoryFiles;

/// What the server does wrong, per file name.
#[derive(Default, Debug, Clone)]
pub struct Faults {
    /// Cut the body at these offsets of the file, one per request (the first one past where
    /// the request starts; each used once).
    pub drop_at: HashMap<String, Vec<u64>>,
    /// Stop sending at these offsets (once each) for a minute, keeping the connection open.
    pub stall_at: HashMap<String, Vec<u64>>,
    /// Flip a byte in the body this many times (`u32::MAX`: always).
    pub corrupt: HashMap<String, u32>,
    /// Answer these statuses, in order, before serving the file.
    pub statuses: HashMap<String, Vec<u16>>,
    /// Always 404.
    pub missing: HashSet<String>,
    /// Serve this instead of the file's bytes (e.g. a truncated JSON file).
    pub replace: HashMap<String, Vec<u8>>,
    /// Ignore `Range` headers (always 200 with the whole file).
    pub no_range: bool,
    /// Send no `Content-Length` (a chunked body) for these files.
    pub no_length: HashSet<String>,
    /// After these files' bytes, send this many zero bytes more (made as they are sent).
    pub append_zeros: HashMap<String, u64>,
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub file: String,
    pub range: Option<String>,
}

struct Inner {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
    faults: Mutex<Faults>,
    log: Mutex<Vec<Request>>,
}

/// A running server: files under `/m/`.
#[derive(Clone)]
pub struct FaultServer {
    inner: Arc<Inner>,
    pub addr: SocketAddr,
}

impl FaultServer {
    pub async fn start(files: BTreeMap<String, Vec<u8>>) -> FaultServer {
        let inner = Arc::new(Inner {
            files: Mutex::new(files),
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(serve)
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FaultServer { inner, addr }
    }

    /// The model's folder URL.
    pub fn url(&self) -> String {
        format!("http://{}/m/", self.addr)
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.inner.faults.lock().unwrap() = faults;
    }

    pub fn faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.inner.faults.lock().unwrap());
    }

    pub fn set_file(&self, name: &str, bytes: Vec<u8>) {
        self.inner
            .files
            .lock()
            .unwrap()
            .insert(name.to_string(), bytes);
    }

    pub fn log(&self) -> Vec<Request> {
        self.inner.log.lock().unwrap().clone()
    }

    pub fn clear_log(&self) {
        self.inner.log.lock().unwrap().clear();
    }

    /// Requests for `file`.
    pub fn requests(&self, file: &str) -> Vec<Request> {
        self.log().into_iter().filter(|r| r.file == file).collect()
    }
}

fn status(code: u16) -> Response {
    Response::builder()
        .status(code)
        .body(Body::from(format!("status {code}")))
        .unwrap()
}

async fn serve(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path();
    let Some(file) = path.strip_prefix("/m/") else {
        return status(404);
    };
    let file = percent_encoding::percent_decode_str(file)
        .decode_utf8_lossy()
        .into_owned();
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    inner.log.lock().unwrap().push(Request {
        file: file.clone(),
        range: range.clone(),
    });
    let mut faults = inner.faults.lock().unwrap();
    if faults.missing.contains(&file) {
        return status(404);
    }
    if let Some(list) = faults.statuses.get_mut(&file) {
        if !list.is_empty() {
            return status(list.remove(0));
        }
    }
    let bytes = match faults.replace.get(&file) {
        Some(b) => b.clone(),
        None => match inner.files.lock().unwrap().get(&file) {
            Some(b) => b.clone(),
            None => return status(404),
        },
    };
    let mut bytes = bytes;
    if let Some(n) = faults.corrupt.get_mut(&file) {
        if *n > 0 {
            if *n != u32::MAX {
                *n -= 1;
            }
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x5a;
        }
    }
    let total = bytes.len() as u64;
    let start = match range.as_deref().filter(|_| !faults.no_range) {
        Some(r) => match r
            .strip_prefix("bytes=")
            .and_then(|r| r.strip_suffix('-'))
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(s) if s < total => Some(s),
            Some(_) => {
                return Response::builder()
                    .status(416)
                    .header(header::CONTENT_RANGE, format!("bytes */{total}"))
                    .body(Body::empty())
                    .unwrap()
            }
            None => return status(400),
        },
        None => None,
    };
    let from = start.unwrap_or(0);
    let cut = faults.drop_at.get_mut(&file).and_then(|cuts| {
        let i = cuts.iter().position(|&c| c > from && c < total)?;
        Some(cuts.remove(i))
    });
    let stall = faults.stall_at.get_mut(&file).and_then(|at| {
        let i = at.iter().position(|&c| c > from && c < total)?;
        Some(at.remove(i))
    });
    let no_length = faults.no_length.contains(&file);
    let zeros = faults.append_zeros.get(&file).copied().unwrap_or(0);
    drop(faults);
    let body_bytes = Bytes::from(bytes).slice(from as usize..);
    let mut builder = Response::builder().header(
        header::ACCEPT_RANGES,
        if start.is_some() { "bytes" } else { "none" },
    );
    if !no_length {
        builder = builder.header(header::CONTENT_LENGTH, total - from + zeros);
    }
    let builder = match start {
        Some(s) => builder.status(StatusCode::PARTIAL_CONTENT).header(
            header::CONTENT_RANGE,
            format!("bytes {s}-{}/{total}", total - 1),
        ),
        None => builder.status(StatusCode::OK),
    };
    // The body in 16 KiB pieces (a piece starts at the stall offset, if any), ending in an error
    // after `cut` bytes when a drop is due.
    let keep = cut.map_or(body_bytes.len(), |c| (c - from) as usize);
    let stall_rel = stall.map(|s| ((s - from) as usize).min(keep));
    let mut pieces: Vec<Result<Bytes, std::io::Error>> = Vec::new();
    let mut stall_index = None;
    let mut at = 0;
    for end in [stall_rel.unwrap_or(keep), keep] {
        if Some(at) == stall_rel {
            stall_index = Some(pieces.len());
        }
        while at < end {
            let e = (at + 16384).min(end);
            pieces.push(Ok(body_bytes.slice(at..e)));
            at = e;
        }
    }
    if cut.is_some() {
        pieces.push(Err(std::io::Error::other("connection dropped on purpose")));
    }
    // The zeros, in 64 KiB pieces that share one buffer.
    let zero_piece = Bytes::from(vec![0u8; 64 << 10]);
    let mut left = zeros;
    while left > 0 && cut.is_none() {
        let n = left.min(zero_piece.len() as u64) as usize;
        pieces.push(Ok(zero_piece.slice(..n)));
        left -= n as u64;
    }
    let indexed = futures_util::stream::iter(pieces.into_iter().enumerate());
    let stream = futures_util::StreamExt::then(indexed, move |(i, p)| async move {
        if p.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        }
        if Some(i) == stall_index {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        }
        p
    });
    builder.body(Body::from_stream(stream)).unwrap()
}

/// A small RDRR model: `layers` layer groups of two F32 tensors each (about 40 KB a layer),
/// in 64 KiB shards, so groups straddle shard boundaries.
pub fn model_files(layers: u32, seed: u32) -> BTreeMap<String, Vec<u8>> {
    let mut files = MemoryFiles::new();
    let mut opts = WriterOptions::new("faults");
    opts.shard_size = 64 << 10;
    let mut w = RdrrWriter::new(opts).unwrap();
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(12345);
    let mut add = |files: &mut MemoryFiles, name: &str, group: &str, n: u64| {
        let data: Vec<u8> = (0..n * 4)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        w.add_tensor(files, name, "F32", &[n], Some(group), &data)
            .unwrap();
    };
    add(&mut files, "token_embd.weight", "embed", 3000);
    for layer in 0..layers {
        let g = format!("layer.{layer}");
        add(&mut files, &format!("blk.{layer}.attn.weight"), &g, 5000);
        add(&mut files, &format!("blk.{layer}.ffn.weight"), &g, 5500);
    }
    add(&mut files, "output.weight", "head", 3000);
    w.finish(&mut files).unwrap();
    files.insert("tokenizer.json", br#"{"model":{"type":"BPE"}}"#.to_vec());
    files.files
}

/// The shard file names of a model, in order.
pub fn shard_names(files: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    files
        .keys()
        .filter(|k| k.starts_with("shard_"))
        .cloned()
        .collect()
}
