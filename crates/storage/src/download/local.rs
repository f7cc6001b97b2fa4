//! Group hashes a browser worker computes from the shard it fetches
//! ([`worker_fetch`](super::worker_fetch)). A hash stream of the group checks (a whole group,
//! or one block of a BLAKE3 group's tree) whose bytes all lie in one shard, in increasing
//! order there, is hashed by the worker that fetches that shard, which sends back its digest;
//! only the bytes of the other streams (the blocks and groups that straddle shards) go back to
//! the download, so that the download's own thread no longer handles every byte twice.
#![cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::hash_kind::HashKind;
use crate::formats::rdrr::{HashAlgorithm, StreamHasher};

/// One stream a worker hashes itself: its index among the download's group streams, what it
/// computes, and its bytes as (offset in the shard, length), in the stream's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalStream {
    pub stream: usize,
    /// `sha256`, `blake3`, or `blake3-subtree` (then `offset` is the subtree's place).
    pub kind: String,
    #[serde(default)]
    pub offset: u64,
    pub ranges: Vec<(u64, u64)>,
}

impl LocalStream {
    pub(crate) fn new(stream: usize, kind: HashKind, ranges: Vec<(u64, u64)>) -> LocalStream {
        let (kind, offset) = kind.stream_name();
        LocalStream {
            stream,
            kind: kind.to_string(),
            offset,
            ranges,
        }
    }

    fn hasher(&self) -> Result<StreamHasher, String> {
        Ok(match self.kind.as_str() {
            "blake3-subtree" => StreamHasher::blake3_subtree(self.offset),
            k => StreamHasher::new(
                HashAlgorithm::parse(k).ok_or_else(|| format!("unknown hash stream kind {k:?}"))?,
            ),
        })
    }
}

/// The local streams of a shard and the byte ranges (offset, length) that must still go back
/// to the download.
pub(crate) type LocalPlan = (Vec<LocalStream>, Vec<(u64, u64)>);

/// Sorted, merged ranges (offset, length): `[a, b)` spans.
pub(crate) fn merge(mut spans: Vec<(u64, u64)>) -> Vec<Range<u64>> {
    spans.retain(|&(_, n)| n > 0);
    spans.sort_unstable();
    let mut out: Vec<Range<u64>> = Vec::new();
    for (o, n) in spans {
        match out.last_mut() {
            Some(last) if o <= last.end => last.end = last.end.max(o + n),
            _ => out.push(o..o + n),
        }
    }
    out
}

/// The parts of `data` (at `offset`) inside `spans` (sorted, merged), as ranges of `data`.
pub(crate) fn within(spans: &[Range<u64>], offset: u64, len: usize) -> Vec<Range<usize>> {
    let end = offset + len as u64;
    let first = spans.partition_point(|s| s.end <= offset);
    spans[first..]
        .iter()
        .take_while(|s| s.start < end)
        .map(|s| (s.start.max(offset) - offset) as usize..(s.end.min(end) - offset) as usize)
        .collect()
}

/// A worker's local streams as the shard's bytes stream in (each byte once, from 0, in order;
/// [`reset`](LocalHashes::reset) when the shard starts over).
pub(crate) struct LocalHashes {
    streams: Vec<LocalStream>,
    hashers: Vec<StreamHasher>,
}

impl LocalHashes {
    pub(crate) fn new(streams: Vec<LocalStream>) -> Result<LocalHashes, String> {
        for s in &streams {
            let increasing = s.ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0);
            if !increasing {
                return Err(format!(
                    "local stream {}: its ranges are not in increasing order",
                    s.stream
                ));
            }
        }
        let hashers = streams
            .iter()
            .map(LocalStream::hasher)
            .collect::<Result<_, _>>()?;
        Ok(LocalHashes { streams, hashers })
    }

    /// The shard starts over: nothing seen counts.
    pub(crate) fn reset(&mut self) {
        for (h, s) in self.hashers.iter_mut().zip(&self.streams) {
            if let Ok(fresh) = s.hasher() {
                *h = fresh;
            }
        }
    }

    /// The shard's bytes `data` at `offset`.
    pub(crate) fn feed(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        for (s, h) in self.streams.iter().zip(&mut self.hashers) {
            for &(o, n) in &s.ranges {
                let (from, to) = (o.max(offset), (o + n).min(end));
                if from < to {
                    h.update(&data[(from - offset) as usize..(to - offset) as usize]);
                }
            }
        }
    }

    /// (stream, digest) of every local stream.
    pub(crate) fn finish(self) -> Vec<(usize, String)> {
        self.streams
            .iter()
            .zip(self.hashers)
            .map(|(s, h)| (s.stream, h.finalize_hex()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::rdrr::hash_hex;

    #[test]
    fn spans_merge_and_cut() {
        let m = merge(vec![(10, 5), (0, 3), (12, 10), (30, 0), (40, 2)]);
        assert_eq!(m, vec![0..3, 10..22, 40..42]);
        assert_eq!(within(&m, 0, 50), vec![0..3, 10..22, 40..42]);
        assert_eq!(within(&m, 11, 5), vec![0..5]);
        assert_eq!(within(&m, 3, 7), Vec::<Range<usize>>::new());
        assert_eq!(within(&m, 20, 21), vec![0..2, 20..21]);
    }

    #[test]
    fn local_streams_hash_their_ranges_in_any_chunking() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        // A SHA-256 group over two ranges, and a BLAKE3 one.
        let ranges = vec![(100, 5000), (7000, 20_000)];
        let mut whole = data[100..5100].to_vec();
        whole.extend_from_slice(&data[7000..27_000]);
        let streams = vec![
            LocalStream::new(3, HashKind::Plain(HashAlgorithm::Sha256), ranges.clone()),
            LocalStream::new(9, HashKind::Plain(HashAlgorithm::Blake3), ranges),
        ];
        for chunk in [1usize, 777, 4096, 100_000] {
            let mut l = LocalHashes::new(streams.clone()).unwrap();
            // A false start, then the shard from its first byte.
            l.feed(0, &data[..300]);
            l.reset();
            for (i, c) in data.chunks(chunk).enumerate() {
                l.feed((i * chunk) as u64, c);
            }
            let got = l.finish();
            assert_eq!(
                got[0],
                (3, hash_hex(HashAlgorithm::Sha256, &whole)),
                "chunk {chunk}"
            );
            assert_eq!(
                got[1],
                (9, hash_hex(HashAlgorithm::Blake3, &whole)),
                "chunk {chunk}"
            );
        }
        let bad = LocalStream::new(
            1,
            HashKind::Plain(HashAlgorithm::Sha256),
            vec![(50, 10), (10, 5)],
        );
        assert!(LocalHashes::new(vec![bad]).is_err());
    }
}
