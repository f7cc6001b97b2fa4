//! The hash workers' side (js/hash-worker.js): a streamed hash of a download's bytes, on a
//! worker of its own, from this same module.

use wasm_bindgen::prelude::*;

use super::errors::WebError;
use crate::formats::rdrr::{HashAlgorithm, StreamHasher};

/// `sha256` or `blake3` (the manifest's spellings, [`HashAlgorithm::parse`]).
pub(crate) fn algorithm_named(name: &str) -> Result<HashAlgorithm, JsValue> {
    HashAlgorithm::parse(name).ok_or_else(|| {
        WebError::new(
            "BadArgument",
            format!("unknown hash algorithm {name:?} (sha256 or blake3)"),
        )
        .into()
    })
}

/// One hash stream: bytes in, in order; the lowercase hex digest out.
#[wasm_bindgen]
pub struct HashStream(StreamHasher);

#[wasm_bindgen]
impl HashStream {
    /// `sha256`, `blake3`, or `blake3-subtree`: the subtree of a larger BLAKE3 input that
    /// starts at `offset` (a multiple of its size, a power of two of 1 KiB chunks), whose
    /// digest is its chaining value.
    #[wasm_bindgen(constructor)]
    pub fn new(kind: &str, offset: Option<f64>) -> Result<HashStream, JsValue> {
        if kind == "blake3-subtree" {
            let offset = offset.unwrap_or(0.0);
            let whole = offset >= 0.0 && offset.fract() == 0.0 && offset < 2f64.powi(53);
            if !whole || offset as u64 % 1024 != 0 {
                return Err(WebError::new(
                    "BadArgument",
                    format!(
                        "a subtree offset must be a whole number of 1 KiB chunks, not {offset}"
                    ),
                )
                .into());
            }
            return Ok(HashStream(StreamHasher::blake3_subtree(offset as u64)));
        }
        Ok(HashStream(StreamHasher::new(algorithm_named(kind)?)))
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> String {
        self.0.finalize_hex()
    }
}

/// This module's compiled `WebAssembly.Module`, which the package posts to its hash workers
/// (js/hash-pool.js) so they start without fetching or compiling it again.
#[wasm_bindgen]
pub fn wasm_module() -> JsValue {
    wasm_bindgen::module()
}
