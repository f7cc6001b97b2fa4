//! Group hashes, checked while the shards stream where the order allows, else by reading back.
//!
//! A group's hash covers its tensors' bytes in the order of its `tensors` list (a tensor split
//! across shards hashed whole). Each group becomes a list of segments (shard, offset, size);
//! as a shard streams, every group whose *next* segment the arriving bytes cover is fed (a
//! resumed shard's stored prefix is fed too, as it is hashed). Bytes that arrive before their
//! turn (a group straddling shards 4 and 5 gets the head of shard 5 while shard 4 still
//! streams, as parallel fetches do) are kept, as the reference-counted pieces the network
//! delivered, within a memory budget shared by all groups, and hashed in order once the bytes
//! before them have been. A group whose early bytes do not fit the budget, or whose shard
//! restarts, fails verification or was verified by an earlier run, is hashed afterwards by
//! reading its bytes back from the store.
//!
//! A BLAKE3 group longer than one [`TREE_BLOCK`] needs no order: BLAKE3 is a tree, so each
//! aligned block of the group's bytes is hashed as a subtree of its own as soon as all of it has
//! arrived (from whichever shards, on whichever hashing thread), and the blocks' chaining values
//! merge into the group's hash at the end. Only blocks still missing bytes are held (the one
//! each shard in flight is filling, and the block across each boundary between shards fetched
//! at different times), so a large group, such as a tied embedding over ten shards, is neither
//! read back nor hashed on one core.

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;

use super::fetch::StreamObserver;
use super::hashing::{HashKind, Hashing, WorkerPool};
use super::DownloadError;
use crate::formats::rdrr::{blake3_subtree_root, HashAlgorithm, Manifest, TensorSpan};
use crate::storage::store::ShardStore;

/// Bytes of a BLAKE3 group's subtrees (a power of two of 1 KiB chunks): large enough that a
/// block is one efficient call of the SIMD hasher, small enough that the blocks held at shard
/// boundaries stay a few MiB.
const TREE_BLOCK: u64 = 1 << 20;

/// Early group bytes held on the browser's hash workers at most (in the workers' memory, not
/// the wasm module's, which never shrinks): room for the shards in flight, so that a group
/// straddling shards fetched at once streams instead of being read back.
const WORKER_EARLY_BUDGET: u64 = 256 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TapState {
    /// Fed as its bytes stream; `next` is the segment expected, `consumed` its bytes seen.
    Streaming { next: usize, consumed: u64 },
    /// Its bytes did not all stream in order: read them back.
    ReadBack,
    /// Every byte was hashed while streaming.
    Done,
}

struct GroupTap {
    id: String,
    expected: String,
    segments: Vec<TensorSpan>,
    state: TapState,
    /// Bytes that arrived before their turn, by (segment, offset in it): the next piece due
    /// is one lookup, however many are held.
    early: BTreeMap<(usize, u64), Bytes>,
    /// Early pieces sent ahead to the stream's hash worker, which holds them until the bytes
    /// before them have been hashed (remote taps): their lengths, by (segment, offset in it).
    sent: BTreeMap<(usize, u64), u64>,
    /// Hashed as BLAKE3 subtrees (then `early` stays empty).
    tree: Option<Tree>,
    /// Its first hash stream: the group's own, or its tree's first block's.
    stream: usize,
}

/// A BLAKE3 group hashed block by block, in any order (see the module documentation).
struct Tree {
    block: u64,
    len: u64,
    /// Where each segment starts in the group's bytes.
    starts: Vec<u64>,
    /// Per block: the pieces in so far, by offset in the block (never overlapping), and their
    /// bytes.
    pending: Vec<BTreeMap<u64, Bytes>>,
    filled: Vec<u64>,
    /// Blocks not yet complete.
    left: usize,
}

impl Tree {
    fn new(segments: &[TensorSpan], block: u64) -> Tree {
        let mut starts = Vec::with_capacity(segments.len());
        let mut len = 0;
        for seg in segments {
            starts.push(len);
            len += seg.size;
        }
        let blocks = len.div_ceil(block) as usize;
        Tree {
            block,
            len,
            starts,
            pending: vec![BTreeMap::new(); blocks],
            filled: vec![0; blocks],
            left: blocks,
        }
    }

    fn blocks(&self) -> usize {
        self.filled.len()
    }

    fn block_len(&self, k: usize) -> u64 {
        (self.len - k as u64 * self.block).min(self.block)
    }

    /// Bytes held in incomplete blocks.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.pending
            .iter()
            .flat_map(|p| p.values())
            .map(|b| b.len() as u64)
            .sum()
    }

    /// `piece` at offset `at` of segment `j` arrived: the blocks it completes go to `out` as
    /// (hash stream, piece), block k's pieces in order to stream `first + k`. False if it
    /// overlaps bytes already in (a repeat).
    fn feed(
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
    groups: Vec<GroupTap>,
    /// Per shard: (group, segment) pairs whose segment lies in it.
    by_shard: Vec<Vec<(usize, usize)>>,
    /// Bytes held for groups as early bytes, and the most that may be.
    held: u64,
    budget: u64,
    /// Early bytes go ahead to the hash workers (which put them in order), not kept here.
    remote: bool,
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
    fn new(manifest: &Manifest, budget: u64, tree_block: Option<u64>) -> Result<GroupTaps, String> {
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
            let len: u64 = segments.iter().map(|s| s.size).sum();
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
    fn kinds(&self, alg: HashAlgorithm) -> Vec<HashKind> {
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
    fn feed(&mut self, shard: usize, offset: u64, data: &Bytes) -> Fed {
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

    /// Everything seen of shard `shard` is void: its groups are read back.
    fn void(&mut self, shard: usize) {
        for k in 0..self.by_shard.get(shard).map_or(0, Vec::len) {
            let (g, _) = self.by_shard[shard][k];
            self.read_back(g);
        }
    }
}

/// Group checks of one download: the taps and the hashing of what they pass on.
pub(crate) struct GroupChecks {
    alg: HashAlgorithm,
    taps: RefCell<GroupTaps>,
    /// A shard's `feed` and the hand-over of its pieces happen in one synchronous step: the
    /// shards stream concurrently, and a group's pieces must reach its hasher in the order
    /// `feed` decided (one feed may pass on several pieces of a group, early bytes included).
    /// Only then does the shard wait, for the threads it fed to catch up.
    hashing: Hashing,
    /// Where the groups read back are hashed: the same workers or as many threads, so that
    /// several groups' read-backs hash at once.
    threads: usize,
    pool: Option<WorkerPool>,
    /// Groups read back, by index: claimed (None) or hashed (their digest).
    read: RefCell<BTreeMap<usize, Option<String>>>,
    read_bytes: std::cell::Cell<u64>,
}

impl GroupChecks {
    /// Checks for the hashed groups of `manifest`, hashed on `pool`'s workers, else on
    /// `threads` threads (0: inline), keeping at most `early_budget` bytes that arrive before
    /// their turn.
    pub(crate) fn new(
        manifest: &Manifest,
        threads: usize,
        pool: Option<&WorkerPool>,
        early_budget: u64,
    ) -> Result<GroupChecks, DownloadError> {
        Self::with_tree_block(manifest, threads, pool, early_budget, TREE_BLOCK)
    }

    /// [`GroupChecks::new`] with BLAKE3 groups hashed as subtrees of `tree_block` bytes (a
    /// power of two of 1 KiB chunks).
    pub(crate) fn with_tree_block(
        manifest: &Manifest,
        threads: usize,
        pool: Option<&WorkerPool>,
        early_budget: u64,
        tree_block: u64,
    ) -> Result<GroupChecks, DownloadError> {
        let alg = manifest.group_hash_algorithm();
        let tree_block = (alg == HashAlgorithm::Blake3).then_some(tree_block);
        let mut taps = GroupTaps::new(manifest, early_budget, tree_block).map_err(|p| {
            DownloadError::InvalidManifest {
                url: "manifest.json".to_string(),
                problems: vec![p],
            }
        })?;
        let hashing = Hashing::new(taps.kinds(alg), threads, pool)?;
        if hashing.holds_ahead() {
            taps.remote = true;
            taps.budget = taps.budget.max(WORKER_EARLY_BUDGET);
        }
        Ok(GroupChecks {
            alg,
            taps: RefCell::new(taps),
            hashing,
            threads,
            pool: pool.cloned(),
            read: RefCell::new(BTreeMap::new()),
            read_bytes: std::cell::Cell::new(0),
        })
    }

    /// Shard `shard`'s bytes came from an earlier run: its groups are read back.
    pub(crate) fn void_shard(&self, shard: usize) {
        self.taps.borrow_mut().void(shard);
    }

    /// Read back now the groups not hashed while streaming whose shards are all stored and
    /// verified (`verified(shard)`), so that their read-back overlaps the shards still
    /// streaming rather than following the download; each group once. `chunk` bytes a read.
    pub(crate) async fn read_back_ready<S: ShardStore>(
        &self,
        manifest: &Manifest,
        store: &S,
        model: &str,
        chunk: usize,
        verified: impl Fn(usize) -> bool,
    ) -> Result<(), DownloadError> {
        let ready: Vec<usize> = {
            let taps = self.taps.borrow();
            let read = self.read.borrow();
            taps.groups
                .iter()
                .enumerate()
                .filter(|(g, tap)| {
                    tap.state != TapState::Done
                        && !read.contains_key(g)
                        && tap.segments.iter().all(|s| verified(s.shard))
                })
                .map(|(g, _)| g)
                .collect()
        };
        if ready.is_empty() {
            return Ok(());
        }
        // Claimed before the first await: a later call does not take them again.
        for &g in &ready {
            self.read.borrow_mut().insert(g, None);
        }
        let digests = self
            .read_back(&ready, manifest, store, model, chunk)
            .await?;
        let mut read = self.read.borrow_mut();
        for (g, d) in ready.into_iter().zip(digests) {
            read.insert(g, Some(d));
        }
        Ok(())
    }

    /// The digests of groups `which`, their bytes read from the store in turns of a chunk per
    /// group, so that their streams hash at once on the workers or threads.
    async fn read_back<S: ShardStore>(
        &self,
        which: &[usize],
        manifest: &Manifest,
        store: &S,
        model: &str,
        chunk: usize,
    ) -> Result<Vec<String>, DownloadError> {
        if which.is_empty() {
            return Ok(Vec::new());
        }
        // Per group: its byte ranges in the store.
        let mut back: Vec<Vec<StoredRange>> = Vec::with_capacity(which.len());
        {
            let taps = self.taps.borrow();
            for &g in which {
                let mut ranges = Vec::new();
                for seg in &taps.groups[g].segments {
                    let file = manifest.shard_file(seg.shard).map_err(|e| {
                        DownloadError::InvalidManifest {
                            url: model.to_string(),
                            problems: vec![e.to_string()],
                        }
                    })?;
                    ranges.push((file, seg.offset, seg.offset + seg.size));
                }
                back.push(ranges);
            }
        }
        let kinds = vec![HashKind::Plain(self.alg); back.len()];
        let hashing = Hashing::new(kinds, self.threads, self.pool.as_ref())?;
        let chunk = chunk.clamp(4096, 64 << 20) as u64;
        // Per group: its next range and offset in it.
        let mut at: Vec<(usize, u64)> = back
            .iter()
            .map(|r| (0, r.first().map_or(0, |r| r.1)))
            .collect();
        let mut bytes = 0u64;
        loop {
            let mut waits = Vec::new();
            let mut read = false;
            for (stream, ranges) in back.iter().enumerate() {
                let (range, pos) = &mut at[stream];
                while *range < ranges.len() && *pos >= ranges[*range].2 {
                    *range += 1;
                    if let Some(r) = ranges.get(*range) {
                        *pos = r.1;
                    }
                }
                let Some(&(file, _, end)) = ranges.get(*range) else {
                    continue;
                };
                let n = (end - *pos).min(chunk) as usize;
                let mut buf = vec![0u8; n];
                store.read_partial(model, file, *pos, &mut buf).await?;
                *pos += n as u64;
                bytes += n as u64;
                read = true;
                if let Some(w) = hashing.enqueue(stream, Bytes::from(buf))? {
                    waits.push(w);
                }
            }
            if !read {
                break;
            }
            waits.sort_unstable();
            waits.dedup();
            for w in waits {
                hashing.drained(w).await;
            }
        }
        self.read_bytes.set(self.read_bytes.get() + bytes);
        hashing.finish().await
    }

    /// Check every group: those hashed while streaming or read back already at once, the
    /// others by reading their bytes from the store (`chunk` bytes a read). Returns
    /// (streamed, read back, bytes read back).
    pub(crate) async fn check<S: ShardStore>(
        self,
        manifest: &Manifest,
        store: &S,
        model: &str,
        chunk: usize,
    ) -> Result<(usize, usize, u64), DownloadError> {
        let rest: Vec<usize> = {
            let taps = self.taps.borrow();
            let read = self.read.borrow();
            (0..taps.groups.len())
                .filter(|g| {
                    taps.groups[*g].state != TapState::Done && !matches!(read.get(g), Some(Some(_)))
                })
                .collect()
        };
        let late = self.read_back(&rest, manifest, store, model, chunk).await?;
        let digests = self.hashing.finish().await?;
        let mut read = self.read.take();
        for (g, d) in rest.into_iter().zip(late) {
            read.insert(g, Some(d));
        }
        let groups = self.taps.into_inner().groups;
        let total = groups.len();
        let lost =
            |id: &str| DownloadError::Hashing(format!("group {id:?}: a hash stream was lost"));
        let mut read_back = 0;
        for (g, tap) in groups.into_iter().enumerate() {
            let actual = if tap.state != TapState::Done {
                read_back += 1;
                read.remove(&g).flatten().ok_or_else(|| lost(&tap.id))?
            } else {
                match &tap.tree {
                    Some(t) => {
                        let cvs = digests
                            .get(tap.stream..tap.stream + t.blocks())
                            .ok_or_else(|| lost(&tap.id))?;
                        blake3_subtree_root(cvs, t.block, t.len).ok_or_else(|| lost(&tap.id))?
                    }
                    None => digests
                        .get(tap.stream)
                        .cloned()
                        .ok_or_else(|| lost(&tap.id))?,
                }
            };
            if actual != tap.expected {
                return Err(DownloadError::GroupMismatch {
                    group: tap.id,
                    algorithm: DownloadError::alg_name(self.alg),
                    expected: tap.expected,
                    actual,
                });
            }
        }
        Ok((total - read_back, read_back, self.read_bytes.get()))
    }
}

/// Bytes `start .. end` of one file of the store.
type StoredRange<'a> = (&'a str, u64, u64);

/// A [`StreamObserver`] passing one shard's bytes to the group checks.
pub(crate) struct ShardTap<'a> {
    pub checks: &'a GroupChecks,
    pub shard: usize,
}

impl StreamObserver for ShardTap<'_> {
    async fn bytes(&self, offset: u64, data: &Bytes) -> Result<(), DownloadError> {
        let pieces = self.checks.taps.borrow_mut().feed(self.shard, offset, data);
        let hashing = &self.checks.hashing;
        let mut fed = Vec::new();
        let next = pieces.next.into_iter().map(|(s, p)| hashing.enqueue(s, p));
        let ahead = (pieces.ahead.into_iter()).map(|(s, at, p)| hashing.enqueue_ahead(s, at, p));
        for thread in next.chain(ahead) {
            if let Some(thread) = thread? {
                if !fed.contains(&thread) {
                    fed.push(thread);
                }
            }
        }
        for thread in fed {
            self.checks.hashing.drained(thread).await;
        }
        Ok(())
    }

    fn void(&self) {
        self.checks.taps.borrow_mut().void(self.shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::rdrr::{RdrrWriter, WriterOptions};
    use crate::formats::source::MemoryFiles;
    use crate::storage::{MemoryStore, ShardWriter};

    /// A model whose layer groups straddle shard boundaries.
    fn model(alg: HashAlgorithm) -> (Manifest, MemoryFiles) {
        let mut files = MemoryFiles::new();
        let mut opts = WriterOptions::new("t");
        opts.hash_algorithm = alg;
        opts.shard_size = 3 * 4096;
        let mut w = RdrrWriter::new(opts).unwrap();
        for layer in 0..4u32 {
            for t in 0..2u32 {
                let data: Vec<u8> = (0..4000u32)
                    .map(|i| (i * 31 + layer * 7 + t) as u8)
                    .collect();
                w.add_tensor(
                    &mut files,
                    &format!("blk.{layer}.t{t}.weight"),
                    "F32",
                    &[1000],
                    Some(&format!("layer.{layer}")),
                    &data,
                )
                .unwrap();
            }
        }
        w.finish(&mut files).unwrap();
        (Manifest::load(&files).unwrap(), files)
    }

    async fn store_with(manifest: &Manifest, files: &MemoryFiles) -> MemoryStore {
        let store = MemoryStore::new();
        store.begin("m", "src").await.unwrap();
        for shard in &manifest.shards {
            let mut w = store.append("m", &shard.filename, true).await.unwrap();
            w.write(&files.files[&shard.filename]).await.unwrap();
        }
        store
    }

    async fn feed(checks: &GroupChecks, shard: usize, offset: u64, bytes: &[u8]) {
        ShardTap { checks, shard }
            .bytes(offset, &Bytes::copy_from_slice(bytes))
            .await
            .unwrap();
    }

    /// Group checks of `manifest` (BLAKE3 groups of 8000 bytes: trees of four 2 KiB blocks).
    fn new_checks(manifest: &Manifest, threads: usize, budget: u64) -> GroupChecks {
        GroupChecks::with_tree_block(manifest, threads, None, budget, 2048).unwrap()
    }

    /// The browser's hash worker (js/hash-worker.js) for remote taps: each stream hashes the
    /// bytes it is sent in turn and holds those sent ahead until the bytes before them are in.
    struct AheadWorker {
        streams: Vec<(
            crate::formats::rdrr::StreamHasher,
            u64,
            BTreeMap<u64, Bytes>,
        )>,
    }

    impl AheadWorker {
        fn new(kinds: &[HashKind]) -> AheadWorker {
            let streams = kinds
                .iter()
                .map(|k| (k.hasher(), 0, BTreeMap::new()))
                .collect();
            AheadWorker { streams }
        }

        fn take(&mut self, fed: Fed) {
            for (stream, bytes) in fed.next {
                self.data(stream, None, bytes);
            }
            for (stream, at, bytes) in fed.ahead {
                self.data(stream, Some(at), bytes);
            }
        }

        fn data(&mut self, stream: usize, at: Option<u64>, bytes: Bytes) {
            let (hasher, next, held) = &mut self.streams[stream];
            match at {
                Some(at) if at != *next => {
                    assert!(at > *next && !held.contains_key(&at), "bytes at {at} again");
                    held.insert(at, bytes);
                }
                _ => {
                    hasher.update(&bytes);
                    *next += bytes.len() as u64;
                    while let Some(b) = held.remove(next) {
                        hasher.update(&b);
                        *next += b.len() as u64;
                    }
                }
            }
        }
    }

    /// Remote taps (early bytes sent ahead to the stream's worker, as in the browser): shards
    /// interleaved in odd-sized chunks, as parallel fetches deliver them. With room for all
    /// early bytes every SHA-256 group streams and the workers' digests are the groups'; with
    /// room for one chunk some are read back, and the budget holds.
    #[test]
    fn early_bytes_sent_ahead_to_the_workers_stream_every_group() {
        let (manifest, files) = model(HashAlgorithm::Sha256);
        let total: u64 = manifest.shards.iter().map(|s| s.size).sum();
        for (budget, chunk) in [(total, 777usize), (total, 5000), (777, 777)] {
            let mut taps = GroupTaps::new(&manifest, budget, None).unwrap();
            taps.remote = true;
            let kinds = taps.kinds(HashAlgorithm::Sha256);
            let mut worker = AheadWorker::new(&kinds);
            let mut pos = vec![0usize; manifest.shards.len()];
            let mut sent_ahead = 0;
            loop {
                let mut any = false;
                // Last shard first in each round, so that later bytes run ahead.
                for (i, shard) in manifest.shards.iter().enumerate().rev() {
                    let bytes = &files.files[&shard.filename];
                    if pos[i] < bytes.len() {
                        let to = (pos[i] + chunk).min(bytes.len());
                        let data = Bytes::copy_from_slice(&bytes[pos[i]..to]);
                        let fed = taps.feed(i, pos[i] as u64, &data);
                        sent_ahead += fed.ahead.len();
                        worker.take(fed);
                        assert!(taps.held <= budget);
                        pos[i] = to;
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            }
            assert!(sent_ahead > 0, "budget {budget}: nothing ran ahead");
            let mut streamed = 0;
            for (tap, (hasher, next, held)) in taps.groups.iter().zip(worker.streams) {
                if tap.state == TapState::Done {
                    streamed += 1;
                    assert!(held.is_empty() && tap.sent.is_empty(), "{}", tap.id);
                    assert_eq!(next, tap.segments.iter().map(|s| s.size).sum::<u64>());
                    assert_eq!(hasher.finalize_hex(), tap.expected, "{}", tap.id);
                } else {
                    assert_eq!(tap.state, TapState::ReadBack);
                }
            }
            if budget == total {
                assert_eq!(
                    streamed,
                    taps.groups.len(),
                    "budget {budget}, chunk {chunk}"
                );
                assert_eq!(taps.held, 0);
            } else {
                assert!(streamed < taps.groups.len());
            }
        }
    }

    async fn orders(threads: usize, alg: HashAlgorithm) {
        let (manifest, files) = model(alg);
        assert!(manifest.shards.len() >= 3 && manifest.groups.len() >= 4);
        let store = store_with(&manifest, &files).await;
        let n = manifest.groups.len();
        // BLAKE3 groups are trees: no order needed, nothing read back but after a repeat.
        let tree = alg == HashAlgorithm::Blake3;
        let trees = |c: &GroupChecks| {
            c.taps
                .borrow()
                .groups
                .iter()
                .filter(|t| t.tree.is_some())
                .count()
        };

        // In order, in odd-sized chunks: every group hashed while streaming.
        let checks = new_checks(&manifest, threads, 0);
        assert_eq!(trees(&checks), if tree { n } else { 0 });
        for (i, shard) in manifest.shards.iter().enumerate() {
            let bytes = &files.files[&shard.filename];
            for (k, chunk) in bytes.chunks(777).enumerate() {
                feed(&checks, i, k as u64 * 777, chunk).await;
            }
        }
        let got = checks.check(&manifest, &store, "m", 4096).await.unwrap();
        assert_eq!(got, (n, 0, 0));

        // Last shard first, no room for early bytes: groups reaching into it are read back,
        // and still verify (trees: all streamed, no block held at the end).
        let checks = new_checks(&manifest, threads, 0);
        for i in (0..manifest.shards.len()).rev() {
            feed(&checks, i, 0, &files.files[&manifest.shards[i].filename]).await;
        }
        let tree_held: u64 = checks
            .taps
            .borrow()
            .groups
            .iter()
            .filter_map(|t| t.tree.as_ref())
            .map(Tree::held)
            .sum();
        assert_eq!(tree_held, 0);
        let (streamed, read_back, bytes) =
            checks.check(&manifest, &store, "m", 4096).await.unwrap();
        assert_eq!(streamed + read_back, n);
        if tree {
            assert_eq!((read_back, bytes), (0, 0));
        } else {
            assert!(read_back >= 1 && bytes > 0, "{read_back} {bytes}");
        }

        // Last shard first with room for the early bytes: every group streamed, none read back.
        let total: u64 = manifest.shards.iter().map(|s| s.size).sum();
        let checks = new_checks(&manifest, threads, total);
        for i in (0..manifest.shards.len()).rev() {
            feed(&checks, i, 0, &files.files[&manifest.shards[i].filename]).await;
        }
        assert_eq!(checks.taps.borrow().held, 0);
        let got = checks.check(&manifest, &store, "m", 4096).await.unwrap();
        assert_eq!(got, (n, 0, 0));

        // Shards interleaved in odd-sized chunks, as parallel fetches deliver them: with room
        // for one chunk only, groups are read back; with room for them all, none; all verify.
        for budget in [777u64, total] {
            let checks = new_checks(&manifest, threads, budget);
            let mut pos = vec![0usize; manifest.shards.len()];
            loop {
                let mut any = false;
                for (i, shard) in manifest.shards.iter().enumerate() {
                    let bytes = &files.files[&shard.filename];
                    if pos[i] < bytes.len() {
                        let to = (pos[i] + 777).min(bytes.len());
                        feed(&checks, i, pos[i] as u64, &bytes[pos[i]..to]).await;
                        pos[i] = to;
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            }
            assert!(checks.taps.borrow().held <= budget);
            let (streamed, read_back, _) =
                checks.check(&manifest, &store, "m", 4096).await.unwrap();
            assert_eq!(streamed + read_back, n);
            if budget == total || tree {
                assert_eq!(read_back, 0, "budget {budget}");
            } else {
                assert!(read_back >= 1, "budget {budget}");
            }
        }

        // Bytes of a group that has moved on, again (a repeat; here layer 1's first tensor, at
        // the end of shard 0): the group is read back, and verifies.
        let checks = new_checks(&manifest, threads, total);
        let shard0 = &files.files[&manifest.shards[0].filename];
        feed(&checks, 0, 0, shard0).await;
        feed(&checks, 0, 8192, &shard0[8192..]).await;
        for i in 1..manifest.shards.len() {
            feed(&checks, i, 0, &files.files[&manifest.shards[i].filename]).await;
        }
        let (streamed, read_back, _) = checks.check(&manifest, &store, "m", 4096).await.unwrap();
        assert_eq!(streamed + read_back, n);
        assert!(read_back >= 1);

        // Every group read back (its shards verified by an earlier run), in turns of 1000
        // bytes over the threads: all verify; with one stored byte of the last group wrong, that
        // group fails and names itself.
        let every = |checks: &GroupChecks| {
            for i in 0..manifest.shards.len() {
                checks.void_shard(i);
            }
        };
        let checks = new_checks(&manifest, threads, total);
        every(&checks);
        let got = checks.check(&manifest, &store, "m", 1000).await.unwrap();
        let taps = GroupTaps::new(&manifest, 0, None).unwrap();
        let all: u64 = taps
            .groups
            .iter()
            .flat_map(|g| &g.segments)
            .map(|s| s.size)
            .sum();
        assert_eq!(got, (0, n, all));
        let last = taps.groups.last().unwrap();
        let span = *last.segments.last().unwrap();
        let mut bad = MemoryFiles::new();
        for shard in &manifest.shards {
            let mut bytes = files.files[&shard.filename].clone();
            if manifest.shards[span.shard].filename == shard.filename {
                bytes[(span.offset + span.size - 1) as usize] ^= 1;
            }
            bad.files.insert(shard.filename.clone(), bytes);
        }
        let bad_store = store_with(&manifest, &bad).await;
        let checks = new_checks(&manifest, threads, total);
        every(&checks);
        match checks.check(&manifest, &bad_store, "m", 1000).await {
            Err(DownloadError::GroupMismatch { group, .. }) => assert_eq!(group, last.id),
            other => panic!("{other:?}"),
        }

        // Wrong bytes streamed for a group are caught (here: shard 0 fed shard 1's bytes).
        let checks = new_checks(&manifest, threads, total);
        feed(&checks, 0, 0, &files.files[&manifest.shards[1].filename]).await;
        let err = checks.check(&manifest, &store, "m", 4096).await;
        assert!(
            matches!(err, Err(DownloadError::GroupMismatch { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn in_order_streams_hash_every_group_and_out_of_order_reads_back() {
        // Inline, one thread, and groups dealt over three threads (digests dealt back in order).
        for alg in [HashAlgorithm::Sha256, HashAlgorithm::Blake3] {
            pollster::block_on(orders(0, alg));
            pollster::block_on(orders(1, alg));
            pollster::block_on(orders(3, alg));
        }
    }
}
