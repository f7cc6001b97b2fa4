//! The taps' bookkeeping: which group bytes have streamed in order. Each hashed group is a
//! tap over its segments (shard, offset, size); a shard's arriving bytes feed every group
//! whose next segment they cover, bytes that arrive before their turn are held (or, remote
//! taps, sent ahead to the stream's hash worker) within a budget shared by all groups and
//! passed on once their turn comes, and a group whose bytes cannot stream in order is marked
//! to be read back.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::blake3_tree::Tree;
use crate::download::hash_kind::HashKind;
use crate::download::local::{LocalPlan, LocalStream};
use crate::formats::rdrr::{HashAlgorithm, Manifest, TensorSpan};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TapState {
    /// Fed as its bytes stream; `next` is the segment expected, `consumed` its bytes seen.
    Streaming { next: usize, consumed: u64 },
    /// Its bytes did not all stream in order: read them back.
    ReadBack,
    /// Every byte was hashed while streaming.
    Done,
}

pub(super) struct GroupTap {
    pub(super) id: String,
    pub(super) expected: String,
    pub(super) segments: Vec<TensorSpan>,
    pub(super) state: TapState,
    /// Bytes that arrived before their turn, by (segment, offset in it): the next piece due
    /// is one lookup, however many are held.
    early: BTreeMap<(usize, u64), Bytes>,
    /// Early pieces sent ahead to the stream's hash worker, which holds them until the bytes
    /// before them have been hashed (remote taps): their lengths, by (segment, offset in it).
    pub(super) sent: BTreeMap<(usize, u64), u64>,
    /// Hashed as BLAKE3 subtrees (then `early` stays empty).
    pub(super) tree: Option<Tree>,
    /// Its first hash stream: the group's own, or its tree's first block's.
    pub(super) stream: usize,
    /// (Not a tree) hashed by the worker fetching its one shard.
    pub(super) local: bool,
}

impl GroupTap {
    /// Skip empty segments; done when none are left (a tree: when every block is in).
    fn settle(&mut self) {
        if let Some(tree) = &self.tree {
            if tree.left == 0 && matches!(self.state, TapState::Streaming { .. }) {
                self.state = TapState::Done;
            }
            return;
        }
        if let TapState::Streaming { next, consumed } = &mut self.state {
            while *next < self.segments.len() && self.segments[*next].size == 0 {
                *next += 1;
                *consumed = 0;
            }
            if *next == self.segments.len() {
                self.state = TapState::Done;
            }
        }
    }
}

/// Which group bytes have streamed in order: the bookkeeping of group checks.
pub(crate) struct GroupTaps {
    pub(super) groups: Vec<GroupTap>,
    /// Per shard: (group, segment) pairs whose segment lies in it.
    by_shard: Vec<Vec<(usize, usize)>>,
    /// Bytes held for groups as early bytes, and the most that may be.
    pub(super) held: u64,
    pub(super) budget: u64,
    /// Early bytes go ahead to the hash workers (which put them in order), not kept here.
    pub(super) remote: bool,
}

/// What a shard's bytes give the group streams: pieces next in their stream, in order, and
/// (remote taps) early pieces sent ahead with their place in the stream's bytes.
#[derive(Default)]
pub(crate) struct Fed {
    pub next: Vec<(usize, Bytes)>,
    pub ahead: Vec<(usize, u64, Bytes)>,
}

impl GroupTaps {
    /// The groups of `manifest` that carry a hash, keeping at most `budget` bytes that arrive
    /// early; with `tree_block`, BLAKE3 groups longer than that are hashed as subtrees of that
    /// many bytes. Fails on a group that lists a tensor or a shard the manifest does not have
    /// (validation catches these first).
    pub(super) fn new(
        manifest: &Manifest,
        budget: u64,
        tree_block: Option<u64>,
    ) -> Result<GroupTaps, String> {
        let mut groups = Vec::new();
        let mut streams = 0;
        let mut by_shard = vec![Vec::new(); manifest.shards.len()];
        for (id, group) in &manifest.groups {
            let Some(expected) = &group.hash else {
                continue;
            };
            let mut segments = Vec::new();
            for name in &group.tensors {
                let tensor = manifest.tensors.get(name).ok_or_else(|| {
                    format!("group {id:?} lists tensor {name:?}, which the manifest does not have")
                })?;
                for span in &tensor.spans {
                    if span.shard >= manifest.shards.len() {
                        return Err(format!(
                            "tensor {name:?} (group {id:?}) points at shard {}, which does not exist",
                            span.shard
                        ));
                    }
                    by_shard[span.shard].push((groups.len(), segments.len()));
                    segments.push(*span);
                }
            }
            // No larger than the shards once validation passed (no two spans share bytes, no
            // tensor is listed twice); checked here too, as the trees are sized from it.
            let len = segments
                .iter()
                .try_fold(0u64, |acc, s| acc.checked_add(s.size))
                .filter(|&len| len <= manifest.shard_bytes().unwrap_or(u64::MAX))
                .ok_or_else(|| {
                    format!("group {id:?}: its tensors claim more bytes than the shards hold")
                })?;
            let tree = tree_block
                .filter(|&b| len > b)
                .map(|b| Tree::new(&segments, b));
            let stream = streams;
            streams += tree.as_ref().map_or(1, Tree::blocks);
            let mut tap = GroupTap {
                id: id.clone(),
                expected: expected.to_ascii_lowercase(),
                segments,
                state: TapState::Streaming {
                    next: 0,
                    consumed: 0,
                },
                early: BTreeMap::new(),
                sent: BTreeMap::new(),
                tree,
                stream,
                local: false,
            };
            tap.settle();
            groups.push(tap);
        }
        Ok(GroupTaps {
            groups,
            by_shard,
            held: 0,
            budget,
            remote: false,
        })
    }

    /// Group `g` is read back: its early bytes go.
    fn read_back(&mut self, g: usize) {
        let tap = &mut self.groups[g];
        tap.state = TapState::ReadBack;
        let freed: u64 = tap.early.values().map(|b| b.len() as u64).sum();
        tap.early.clear();
        // Pieces sent ahead stay on their worker (in a stream now never finished in order)
        // until the download ends: they go on counting against the budget.
        tap.sent.clear();
        if let Some(tree) = &mut tap.tree {
            tree.pending.iter_mut().for_each(BTreeMap::clear);
        }
        self.held -= freed;
    }

    /// The hash streams of the groups, in order: one per group, or one per block of a tree.
    pub(super) fn kinds(&self, alg: HashAlgorithm) -> Vec<HashKind> {
        let mut kinds = Vec::new();
        for tap in &self.groups {
            match &tap.tree {
                Some(t) => kinds
                    .extend((0..t.blocks()).map(|k| HashKind::Blake3Subtree(k as u64 * t.block))),
                None => kinds.push(HashKind::Plain(alg)),
            }
        }
        kinds
    }

    /// Bytes `data` at `offset` of shard `shard` arrived: the pieces to hash into each stream
    /// (a group's, or a tree block's), in order (pieces of `data`, early bytes whose turn has
    /// come, a tree block's pieces once it is complete).
    pub(super) fn feed(&mut self, shard: usize, offset: u64, data: &Bytes) -> Fed {
        let mut fed = Fed::default();
        let out = &mut fed.next;
        let pairs = self.by_shard.get(shard).map_or(0, Vec::len);
        let end = offset + data.len() as u64;
        for k in 0..pairs {
            let (g, j) = self.by_shard[shard][k];
            let seg = self.groups[g].segments[j];
            let (from, to) = (offset.max(seg.offset), end.min(seg.offset + seg.size));
            if from >= to {
                continue;
            }
            let TapState::Streaming { next, consumed } = self.groups[g].state else {
                continue;
            };
            if self.groups[g].local {
                continue;
            }
            let at = from - seg.offset;
            let piece = data.slice((from - offset) as usize..(to - offset) as usize);
            let stream = self.groups[g].stream;
            if let Some(tree) = &mut self.groups[g].tree {
                if tree.feed(j, at, piece, stream, out) {
                    self.groups[g].settle();
                } else {
                    self.read_back(g);
                }
                continue;
            }
            if j == next && at == consumed {
                out.push((stream, piece));
                self.advance(g, to - from, out);
            } else if (j > next || (j == next && at > consumed))
                && self.held + (to - from) <= self.budget
            {
                // Early: kept until the bytes before it have been hashed (here, or on the
                // stream's worker).
                self.held += to - from;
                let tap = &mut self.groups[g];
                if self.remote {
                    let place = tap.segments[..j].iter().map(|s| s.size).sum::<u64>() + at;
                    tap.sent.insert((j, at), to - from);
                    fed.ahead.push((stream, place, piece));
                } else {
                    tap.early.insert((j, at), piece);
                }
            } else {
                // Over the budget, or bytes already passed (a gap or a repeat).
                self.read_back(g);
            }
        }
        fed
    }

    /// `n` more bytes of group `g`'s current segment were hashed: move on, and pass on the early
    /// bytes that are now next, for as long as there are.
    fn advance(&mut self, g: usize, mut n: u64, out: &mut Vec<(usize, Bytes)>) {
        loop {
            let tap = &mut self.groups[g];
            let TapState::Streaming { next, consumed } = &mut tap.state else {
                return;
            };
            *consumed += n;
            if *consumed == tap.segments[*next].size {
                *next += 1;
                *consumed = 0;
                tap.settle();
            }
            let TapState::Streaming { next, consumed } = tap.state else {
                return;
            };
            if let Some(len) = tap.sent.remove(&(next, consumed)) {
                // Already on the worker, which hashes it once the bytes before it are in.
                n = len;
                self.held -= n;
                continue;
            }
            let Some(piece) = tap.early.remove(&(next, consumed)) else {
                return;
            };
            n = piece.len() as u64;
            self.held -= n;
            out.push((tap.stream, piece));
        }
    }

    /// The streams of shard `shard`'s groups that the worker fetching it can hash itself (a
    /// whole group, or a tree's block, whose bytes all lie in this shard in increasing order,
    /// none seen yet), marked so: their bytes are no longer expected here, and
    /// [`local_done`](GroupTaps::local_done) takes their digests. Also the byte ranges of the
    /// shard the other streams still need (offset, length).
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(super) fn take_local(&mut self, shard: usize, alg: HashAlgorithm) -> LocalPlan {
        let increasing = |spans: &[(usize, u64, u64)]| {
            spans.iter().all(|s| s.0 == shard)
                && spans.windows(2).all(|w| w[0].1 + w[0].2 <= w[1].1)
        };
        let mut local = Vec::new();
        let mut wanted = Vec::new();
        let mut groups: Vec<usize> = self
            .by_shard
            .get(shard)
            .map_or(Vec::new(), |v| v.iter().map(|&(g, _)| g).collect());
        groups.dedup();
        for g in groups {
            let tap = &mut self.groups[g];
            if !matches!(tap.state, TapState::Streaming { .. }) {
                continue;
            }
            match &mut tap.tree {
                Some(tree) => {
                    for k in 0..tree.blocks() {
                        let spans = tree.block_spans(k, &tap.segments);
                        if tree.local[k] || !spans.iter().any(|s| s.0 == shard) {
                            continue;
                        }
                        if increasing(&spans) && !tree.started(k) {
                            tree.local[k] = true;
                            local.push(LocalStream::new(
                                tap.stream + k,
                                HashKind::Blake3Subtree(k as u64 * tree.block),
                                spans.iter().map(|s| (s.1, s.2)).collect(),
                            ));
                        } else {
                            wanted
                                .extend(spans.iter().filter(|s| s.0 == shard).map(|s| (s.1, s.2)));
                        }
                    }
                }
                None => {
                    let spans: Vec<(usize, u64, u64)> = (tap.segments.iter())
                        .filter(|s| s.size > 0)
                        .map(|s| (s.shard, s.offset, s.size))
                        .collect();
                    let fresh = tap.state
                        == TapState::Streaming {
                            next: 0,
                            consumed: 0,
                        }
                        && tap.early.is_empty()
                        && tap.sent.is_empty();
                    if tap.local {
                        continue;
                    }
                    if increasing(&spans) && fresh {
                        tap.local = true;
                        local.push(LocalStream::new(
                            tap.stream,
                            HashKind::Plain(alg),
                            spans.iter().map(|s| (s.1, s.2)).collect(),
                        ));
                    } else {
                        wanted.extend(spans.iter().filter(|s| s.0 == shard).map(|s| (s.1, s.2)));
                    }
                }
            }
        }
        (local, wanted)
    }

    /// A worker hashed these local streams ([`take_local`](GroupTaps::take_local)): their
    /// groups move on (a group read back meanwhile ignores them). Returns the streams that
    /// count, whose digests the check uses.
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    pub(super) fn local_done(&mut self, streams: &[usize]) -> Vec<usize> {
        let mut counted = Vec::new();
        for &stream in streams {
            let g = self.groups.partition_point(|t| t.stream <= stream);
            let Some(tap) = g.checked_sub(1).and_then(|g| self.groups.get_mut(g)) else {
                continue;
            };
            if !matches!(tap.state, TapState::Streaming { .. }) {
                continue;
            }
            match &mut tap.tree {
                Some(tree) => {
                    let k = stream - tap.stream;
                    if k < tree.blocks() && tree.local[k] && !tree.started(k) {
                        // Marked complete: never again local, never fed.
                        tree.local[k] = false;
                        tree.mark_complete(k);
                        counted.push(stream);
                    }
                }
                None if tap.local && stream == tap.stream => {
                    tap.state = TapState::Done;
                    counted.push(stream);
                }
                None => {}
            }
            tap.settle();
        }
        counted
    }

    /// Everything seen of shard `shard` is void: its groups are read back.
    pub(super) fn void(&mut self, shard: usize) {
        for k in 0..self.by_shard.get(shard).map_or(0, Vec::len) {
            let (g, _) = self.by_shard[shard][k];
            self.read_back(g);
        }
    }
}
