//! A browser worker's link back to the download whose shard it fetches: the `JobLink` the
//! worker script hands over, and the observer that sends the shard's bytes through it.

use std::cell::{Cell, RefCell};
use std::ops::Range;

use bytes::Bytes;
use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::local::{within, LocalHashes};
use super::observe::StreamObserver;
use super::DownloadError;

/// Bytes a worker gathers before sending them back (group checks only).
const PIECE: usize = 1 << 20;

#[wasm_bindgen]
extern "C" {
    /// The worker's side of a job (js/hash-worker.js): messages back to the download.
    #[derive(Debug, Clone)]
    pub type JobLink;

    /// A message: `c` and the progress counts as JSON, or `e` and an event (the download gets
    /// it as `{ t: 'json', json }`).
    #[wasm_bindgen(method)]
    pub(super) fn send(this: &JobLink, json: &str);

    /// The shard's bytes at `offset` (a view of this module's memory: the link copies it);
    /// undefined, or a promise to wait on while too many bytes are unacknowledged.
    #[wasm_bindgen(method)]
    fn bytes(this: &JobLink, offset: f64, data: &[u8]) -> JsValue;

    /// What was sent of the shard is void (it starts over).
    #[wasm_bindgen(method, js_name = voided)]
    fn voided(this: &JobLink);
}

/// Sends a job's bytes back to the download in pieces of [`PIECE`] (those in `wanted`, when
/// given), after feeding its local group streams.
pub(crate) struct LinkObserver<'a> {
    pub(super) link: &'a JobLink,
    pub(super) piece: RefCell<Vec<u8>>,
    pub(super) start: Cell<u64>,
    pub(super) local: RefCell<LocalHashes>,
    pub(super) wanted: Option<Vec<Range<u64>>>,
}

impl LinkObserver<'_> {
    pub(super) async fn flush(&self) {
        let wait = {
            let piece = self.piece.borrow();
            if piece.is_empty() {
                return;
            }
            self.link.bytes(self.start.get() as f64, &piece)
        };
        self.piece.borrow_mut().clear();
        if let Some(p) = wait.dyn_ref::<Promise>() {
            let _ = JsFuture::from(p.clone()).await;
        }
    }

    async fn send(&self, offset: u64, data: &[u8]) {
        let follows = {
            let piece = self.piece.borrow();
            piece.is_empty() || self.start.get() + piece.len() as u64 == offset
        };
        if !follows {
            self.flush().await;
        }
        {
            let mut piece = self.piece.borrow_mut();
            if piece.is_empty() {
                self.start.set(offset);
                piece.reserve(PIECE);
            }
            piece.extend_from_slice(data);
        }
        if self.piece.borrow().len() >= PIECE {
            self.flush().await;
        }
    }
}

impl StreamObserver for LinkObserver<'_> {
    async fn bytes(&self, offset: u64, data: &Bytes) -> Result<(), DownloadError> {
        self.local.borrow_mut().feed(offset, data);
        match &self.wanted {
            None => self.send(offset, data).await,
            Some(spans) => {
                for r in within(spans, offset, data.len()) {
                    self.send(offset + r.start as u64, &data[r]).await;
                }
            }
        }
        Ok(())
    }

    fn void(&self) {
        self.piece.borrow_mut().clear();
        self.local.borrow_mut().reset();
        self.link.voided();
    }
}
