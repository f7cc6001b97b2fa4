//! What one hash stream of a download computes: a plain SHA-256 or BLAKE3, or one subtree of a
//! BLAKE3 input (a group's MiB), and how the browser's workers name it.

use crate::formats::rdrr::{HashAlgorithm, StreamHasher};

/// What a stream computes: a plain hash, or one subtree of a BLAKE3 input that starts at the
/// given offset ([`StreamHasher::blake3_subtree`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HashKind {
    Plain(HashAlgorithm),
    Blake3Subtree(u64),
}

impl HashKind {
    pub(crate) fn hasher(self) -> StreamHasher {
        match self {
            HashKind::Plain(alg) => StreamHasher::new(alg),
            HashKind::Blake3Subtree(offset) => StreamHasher::blake3_subtree(offset),
        }
    }

    /// How the browser's hash workers and a shard's worker name it (`sha256`, `blake3`,
    /// `blake3-subtree`), and the subtree's offset (0 for a plain hash).
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(crate) fn stream_name(self) -> (&'static str, u64) {
        match self {
            HashKind::Plain(HashAlgorithm::Sha256) => ("sha256", 0),
            HashKind::Plain(HashAlgorithm::Blake3) => ("blake3", 0),
            HashKind::Blake3Subtree(offset) => ("blake3-subtree", offset),
        }
    }

    /// The digest of a stream that never had bytes.
    pub(crate) fn empty_digest(self) -> String {
        self.hasher().finalize_hex()
    }
}
