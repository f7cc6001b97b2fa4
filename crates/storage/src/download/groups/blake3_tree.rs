//! A BLAKE3 group hashed as subtrees, in any order: which aligned blocks of the group's bytes
//! the arriving pieces complete. A piece is cut at block boundaries and held with its block
//! until every byte of that block is in (from whichever shards, in whichever order); a
//! complete block's pieces go, in order, to a hash stream of the block's own, which hashes
//! them as a subtree. The blocks' chaining values merge into the group's hash at the end
//! ([`GroupChecks::check`](super::GroupChecks::check)). A piece overlapping bytes already in
//! is a repeat: the group is then read back.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::formats::rdrr::TensorSpan;

/// A BLAKE3 group hashed block by block, in any order (see the module documentation).
pub(super) struct Tree {
    pub(super) block: u64,
    pub(super) len: u64,
    /// Where each segment starts in the group's bytes.
    starts: Vec<u64>,
    /// Per block: the pieces in so far, by offset in the block (never overlapping), and their
    /// bytes.
    pub(super) pending: Vec<BTreeMap<u64, Bytes>>,
    filled: Vec<u64>,
    /// Blocks not yet complete.
    pub(super) left: usize,
    /// Per block: hashed by the worker fetching its shard (its bytes never come here).
    pub(super) local: Vec<bool>,
}

impl Tree {
    /// `len` is the segments' total (checked by the caller: `GroupTaps::new`).
    pub(super) fn new(segments: &[TensorSpan], block: u64) -> Tree {
        let mut starts = Vec::with_capacity(segments.len());
        let mut len = 0u64;
        for seg in segments {
            starts.push(len);
            len = len.saturating_add(seg.size);
        }
        let blocks = len.div_ceil(block) as usize;
        Tree {
            block,
            len,
            starts,
            pending: vec![BTreeMap::new(); blocks],
            filled: vec![0; blocks],
            left: blocks,
            local: vec![false; blocks],
        }
    }

    pub(super) fn blocks(&self) -> usize {
        self.filled.len()
    }

    fn block_len(&self, k: usize) -> u64 {
        (self.len - k as u64 * self.block).min(self.block)
    }

    /// Whether block `k` has had bytes.
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(super) fn started(&self, k: usize) -> bool {
        self.filled[k] > 0
    }

    /// Where block `k`'s bytes are: (shard, offset, length), in the block's order.
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(super) fn block_spans(&self, k: usize, segments: &[TensorSpan]) -> Vec<(usize, u64, u64)> {
        let (start, end) = (
            k as u64 * self.block,
            k as u64 * self.block + self.block_len(k),
        );
        let mut out = Vec::new();
        for (seg, &s) in segments.iter().zip(&self.starts) {
            let (from, to) = (start.max(s), end.min(s + seg.size));
            if from < to {
                out.push((seg.shard, seg.offset + (from - s), to - from));
            }
        }
        out
    }

    /// Block `k` was hashed elsewhere (a worker): complete, and a repeat if any byte comes.
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(super) fn mark_complete(&mut self, k: usize) {
        self.filled[k] = self.block_len(k);
        self.left -= 1;
    }

    /// Bytes held in incomplete blocks.
    #[cfg(test)]
    pub(super) fn held(&self) -> u64 {
        self.pending
            .iter()
            .flat_map(|p| p.values())
            .map(|b| b.len() as u64)
            .sum()
    }

    /// `piece` at offset `at` of segment `j` arrived: the blocks it completes go to `out` as
    /// (hash stream, piece), block k's pieces in order to stream `first + k`. False if it
    /// overlaps bytes already in (a repeat).
    pub(super) fn feed(
        &mut self,
        j: usize,
        at: u64,
        mut piece: Bytes,
        first: usize,
        out: &mut Vec<(usize, Bytes)>,
    ) -> bool {
        let mut pos = self.starts[j] + at;
        while !piece.is_empty() {
            let k = (pos / self.block) as usize;
            let off = pos - k as u64 * self.block;
            let n = ((self.block - off) as usize).min(piece.len());
            let part = piece.split_to(n);
            let end = off + n as u64;
            if self.local[k] {
                // A worker hashes this block (its bytes are not expected here).
                pos += n as u64;
                continue;
            }
            let block_len = self.block_len(k);
            let pending = &mut self.pending[k];
            let overlaps = self.filled[k] == block_len
                || pending
                    .range(..end)
                    .next_back()
                    .is_some_and(|(&o, b)| o + b.len() as u64 > off);
            if overlaps {
                return false;
            }
            pending.insert(off, part);
            self.filled[k] += n as u64;
            if self.filled[k] == block_len {
                for (_, b) in std::mem::take(pending) {
                    out.push((first + k, b));
                }
                self.left -= 1;
            }
            pos += n as u64;
        }
        true
    }
}
