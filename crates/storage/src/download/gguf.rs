//! Downloading one GGUF file: streamed to the store in chunks (never held whole in memory),
//! resumed with `Range`, hashed with SHA-256 as it arrives and checked when a hash is given.
//!
//! Its bytes are checked before the model is committed, hash or not: the header is parsed with
//! the GGUF reader as soon as it has arrived ([`HeaderGuard`]), and from then on no byte past the
//! end of its tensors (padded to the alignment) is written; a body that goes on is refused, and
//! so is one that ends before its last tensor. A server that sends no `Content-Length` cannot
//! make the store keep more than the header describes.

use super::fetch::{fetch_file, Ctx, FileJob, Observer};
use super::gguf_header::HeaderGuard;
use super::hashing::{pool_size, start_workers};
use super::http::HttpClient;
use super::{DownloadError, DownloadEvent, DownloadOptions, DownloadSummary, Tracker};
use crate::formats::rdrr::HashAlgorithm;
use crate::store::{ModelKind, ShardStore};

/// The name of the file inside a partial GGUF download.
pub const GGUF_FILE: &str = "model.gguf";

/// Fetch the GGUF file at `url` into `store` as `name`. With `sha256` (hex), a file that does
/// not match is fetched once more, then the download fails naming both hashes. The file must be
/// a GGUF whose header parses and whose tensors end where the file does (see the module docs);
/// a file that is not is removed. A model already complete in the store is not fetched again.
pub async fn download_gguf<S: ShardStore, C: HttpClient>(
    store: &S,
    client: &C,
    url: &str,
    name: &str,
    sha256: Option<&str>,
    options: &DownloadOptions,
    events: &dyn Fn(&DownloadEvent),
) -> Result<DownloadSummary, DownloadError> {
    let (mut summary, present) = DownloadSummary::if_present(store, name, ModelKind::Gguf).await?;
    if present {
        return Ok(summary);
    }
    let tracker = Tracker::new(events);
    if let Some(h) = sha256 {
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(DownloadError::Protocol {
                url: url.to_string(),
                message: format!("--sha256 {h:?} is not 64 hex digits"),
            });
        }
    }
    let partial = store.begin(name, url).await?;
    for file in store.partial_files(name).await? {
        if file != GGUF_FILE {
            store.remove_partial_file(name, &file).await?;
        }
    }
    tracker.plan(0, 1);
    let verified = partial
        .verified
        .get(GGUF_FILE)
        .filter(|h| sha256.is_none_or(|want| want.eq_ignore_ascii_case(h)))
        .cloned();
    let guard = HeaderGuard::new(url);
    let (hash, len) = match verified {
        Some(hash) => {
            summary.reused_files = 1;
            let len = store.partial_len(name, GGUF_FILE).await?.unwrap_or(0);
            // Verified by an earlier run, perhaps one that did not check the header.
            if let Err(e) = check_stored(store, name, len, &guard).await {
                store.remove_partial_file(name, GGUF_FILE).await?;
                return Err(e);
            }
            (hash, len)
        }
        None => {
            let pool = start_workers(options, &mut summary.warnings).await;
            summary.hash_workers = pool_size(pool.as_ref());
            let ctx = Ctx {
                store,
                client,
                model: name,
                options,
                tracker: &tracker,
                pool: pool.as_ref(),
            };
            let job = FileJob {
                file: GGUF_FILE,
                what: url.to_string(),
                index: 0,
                count: 1,
                urls: vec![url.to_string()],
                size: None,
                algorithm: HashAlgorithm::Sha256,
                expected: sha256,
            };
            let fetched = match fetch_file(&ctx, &job, &Observer::Gguf(&guard)).await {
                Ok(f) => f,
                Err(e @ (DownloadError::BadGguf { .. } | DownloadError::NotGguf { .. })) => {
                    // Bytes that are not the file the header describes: none may be resumed.
                    store.remove_partial_file(name, GGUF_FILE).await?;
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let mut magic = [0u8; 4];
            if fetched.len < 4
                || store
                    .read_partial(name, GGUF_FILE, 0, &mut magic)
                    .await
                    .is_err()
                || &magic != b"GGUF"
            {
                let shown =
                    String::from_utf8_lossy(&magic[..fetched.len.min(4) as usize]).into_owned();
                store.remove_partial_file(name, GGUF_FILE).await?;
                return Err(DownloadError::NotGguf {
                    url: url.to_string(),
                    magic: shown,
                });
            }
            if let Err(e) = guard.finish(fetched.len) {
                store.remove_partial_file(name, GGUF_FILE).await?;
                return Err(e);
            }
            store.mark_verified(name, GGUF_FILE, &fetched.hash).await?;
            summary.fetched_files = 1;
            tracker.file_done();
            tracker.emit(DownloadEvent::FileVerified {
                file: GGUF_FILE.to_string(),
                index: 0,
            });
            (fetched.hash, fetched.len)
        }
    };
    store.commit(name, ModelKind::Gguf, GGUF_FILE).await?;
    summary.bytes = len;
    summary.sha256 = Some(hash);
    summary.fetched_bytes = tracker.fetched();
    tracker.time(&mut summary);
    Ok(summary)
}

/// Check a GGUF stored by an earlier run, `len` bytes: its header read back (at most the
/// header's bytes, a MiB at a time) through `guard`, then its length against the tensors.
async fn check_stored<S: ShardStore>(
    store: &S,
    name: &str,
    len: u64,
    guard: &HeaderGuard,
) -> Result<(), DownloadError> {
    let mut pos = 0u64;
    while pos < len && !guard.has_header() {
        let n = (len - pos).min(1 << 20) as usize;
        let mut buf = vec![0u8; n];
        store.read_partial(name, GGUF_FILE, pos, &mut buf).await?;
        guard.bytes(pos, &buf)?;
        pos += n as u64;
    }
    guard.finish(len)
}
