//! Reading groups back from the store: the groups whose bytes did not all stream in order
//! (or whose shards an earlier run verified) are read from the stored shards, in turns of a
//! chunk per group, so that several groups hash at once on the download's workers or threads;
//! as soon as all of a group's shards are verified, or else when the download ends.

use bytes::Bytes;

use super::taps::TapState;
use super::GroupChecks;
use crate::download::hash_kind::HashKind;
use crate::download::hashing::Hashing;
use crate::download::DownloadError;
use crate::formats::rdrr::Manifest;
use crate::store::ShardStore;

impl GroupChecks {
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
    pub(super) async fn read_back<S: ShardStore>(
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
}

/// Bytes `start .. end` of one file of the store.
type StoredRange<'a> = (&'a str, u64, u64);
