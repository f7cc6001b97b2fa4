//! Where the downloader's hashing runs: inline (wasm, or when asked), or natively on a thread
//! of its own per hashed stream set, so hashing a shard, hashing the groups and receiving and
//! storing the bytes use separate cores. Chunks are `Bytes` (reference-counted slices of what
//! the network delivered): handing one to the hashing thread copies nothing.

use std::cell::RefCell;

use bytes::Bytes;

use super::DownloadError;
use crate::formats::rdrr::{HashAlgorithm, StreamHasher};

/// Chunks waiting for a hashing thread, at most (then `update` waits: backpressure).
#[cfg(not(target_arch = "wasm32"))]
const QUEUE: usize = 32;

/// A set of hash streams, each fed in order and finished together.
pub(crate) enum Hashing {
    Inline(RefCell<Vec<StreamHasher>>),
    #[cfg(not(target_arch = "wasm32"))]
    Thread {
        tx: tokio::sync::mpsc::Sender<(usize, Bytes)>,
        done: futures_channel::oneshot::Receiver<Vec<String>>,
    },
}

impl Hashing {
    /// One stream per entry of `algs`; on a thread when `threaded` (natively).
    pub(crate) fn new(algs: Vec<HashAlgorithm>, threaded: bool) -> Result<Hashing, DownloadError> {
        let hashers: Vec<StreamHasher> = algs.into_iter().map(StreamHasher::new).collect();
        #[cfg(not(target_arch = "wasm32"))]
        if threaded {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<(usize, Bytes)>(QUEUE);
            let (done_tx, done) = futures_channel::oneshot::channel();
            let mut hashers = hashers;
            let spawned = std::thread::Builder::new()
                .name("tritium-hash".to_string())
                .spawn(move || {
                    while let Some((id, data)) = rx.blocking_recv() {
                        if let Some(h) = hashers.get_mut(id) {
                            h.update(&data);
                        }
                    }
                    let digests = hashers
                        .into_iter()
                        .map(StreamHasher::finalize_hex)
                        .collect();
                    // The download may be gone (cancelled): nobody to tell.
                    let _ = done_tx.send(digests);
                });
            return match spawned {
                Ok(_) => Ok(Hashing::Thread { tx, done }),
                Err(e) => Err(DownloadError::Hashing(format!(
                    "cannot start a hashing thread: {e}"
                ))),
            };
        }
        #[cfg(target_arch = "wasm32")]
        let _ = threaded;
        Ok(Hashing::Inline(RefCell::new(hashers)))
    }

    /// Feed `data` to stream `id`.
    pub(crate) async fn update(&self, id: usize, data: Bytes) -> Result<(), DownloadError> {
        match self {
            Hashing::Inline(hashers) => {
                if let Some(h) = hashers.borrow_mut().get_mut(id) {
                    h.update(&data);
                }
                Ok(())
            }
            #[cfg(not(target_arch = "wasm32"))]
            Hashing::Thread { tx, .. } => tx
                .send((id, data))
                .await
                .map_err(|_| DownloadError::Hashing("the hashing thread stopped".to_string())),
        }
    }

    /// The digests (lowercase hex), one per stream.
    pub(crate) async fn finish(self) -> Result<Vec<String>, DownloadError> {
        match self {
            Hashing::Inline(hashers) => Ok(hashers
                .into_inner()
                .into_iter()
                .map(StreamHasher::finalize_hex)
                .collect()),
            #[cfg(not(target_arch = "wasm32"))]
            Hashing::Thread { tx, done } => {
                drop(tx);
                done.await
                    .map_err(|_| DownloadError::Hashing("the hashing thread died".to_string()))
            }
        }
    }
}
