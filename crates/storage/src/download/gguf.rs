//! Downloading one GGUF file: streamed to the store in chunks (never held whole in memory),
//! resumed with `Range`, hashed with SHA-256 as it arrives and checked when a hash is given.

use super::fetch::{fetch_file, Ctx, FileJob, Observer};
use super::hashing::{pool_size, start_workers};
use super::http::HttpClient;
use super::{DownloadError, DownloadEvent, DownloadOptions, DownloadSummary, Tracker};
use crate::formats::rdrr::HashAlgorithm;
use crate::store::{ModelKind, ShardStore};

/// The name of the file inside a partial GGUF download.
pub const GGUF_FILE: &str = "model.gguf";

/// Fetch the GGUF file at `url` into `store` as `name`. With `sha256` (hex), a file that does
/// not match is fetched once more, then the download fails naming both hashes. The file must
/// start with the GGUF magic. A model already complete in the store is not fetched again.
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
    let (hash, len) = match verified {
        Some(hash) => {
            summary.reused_files = 1;
            let len = store.partial_len(name, GGUF_FILE).await?.unwrap_or(0);
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
            let fetched = fetch_file(&ctx, &job, &Observer::None).await?;
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
