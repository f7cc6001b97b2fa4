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
//!
//! The parts: [`taps`] keeps the bookkeeping of which group bytes have streamed in order (and
//! holds or sends ahead those that came early), [`blake3_tree`] the blocks of a BLAKE3 group
//! hashed as subtrees, [`read_back`] the reading of the other groups from the store; here,
//! [`GroupChecks`] joins them to the hashing and checks each group's digest, and [`ShardTap`]
//! passes a shard's bytes in.

mod blake3_tree;
mod read_back;
mod taps;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;

use super::hashing::{Hashing, WorkerPool};
use super::local::LocalPlan;
use super::observe::StreamObserver;
use super::DownloadError;
use crate::formats::rdrr::{blake3_subtree_root, HashAlgorithm, Manifest};
use crate::store::ShardStore;
use taps::{GroupTaps, TapState};

/// Bytes of a BLAKE3 group's subtrees (a power of two of 1 KiB chunks): large enough that a
/// block is one efficient call of the SIMD hasher, small enough that the blocks held at shard
/// boundaries stay a few MiB.
const TREE_BLOCK: u64 = 1 << 20;

/// Early group bytes held on the browser's hash workers at most (in the workers' memory, not
/// the wasm module's, which never shrinks): room for the shards in flight, so that a group
/// straddling shards fetched at once streams instead of being read back.
const WORKER_EARLY_BUDGET: u64 = 256 << 20;

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
    /// Digests of streams the shards' workers hashed (see `local.rs`), by stream.
    local: RefCell<BTreeMap<usize, String>>,
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
            local: RefCell::new(BTreeMap::new()),
        })
    }

    /// Shard `shard`'s bytes came from an earlier run: its groups are read back.
    pub(crate) fn void_shard(&self, shard: usize) {
        self.taps.borrow_mut().void(shard);
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
        let mut digests = self.hashing.finish().await?;
        for (stream, digest) in self.local.take() {
            if let Some(d) = digests.get_mut(stream) {
                *d = digest;
            }
        }
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

    fn take_local(&self) -> Option<LocalPlan> {
        let checks = self.checks;
        Some(checks.taps.borrow_mut().take_local(self.shard, checks.alg))
    }

    fn local_done(&self, digests: Vec<(usize, String)>) {
        let streams: Vec<usize> = digests.iter().map(|d| d.0).collect();
        let counted = self.checks.taps.borrow_mut().local_done(&streams);
        let mut local = self.checks.local.borrow_mut();
        for (stream, digest) in digests {
            if counted.contains(&stream) {
                local.insert(stream, digest);
            }
        }
    }
}
