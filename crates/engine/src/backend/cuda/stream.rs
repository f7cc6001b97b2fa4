//! Blocks whose weights are read from storage when they are used (a GPU memory budget smaller
//! than the model, [`CudaBackend::set_vram_budget`]). Under a budget the weights of transformer
//! blocks that lie unchanged in local files are registered by location instead of uploaded;
//! once the model is loaded (`init_cache`) the schedule ([`Schedule::plan`]) keeps the first
//! blocks resident (read once) and streams the others through two slots of the largest block's
//! size: the first op of a streamed block waits for the slot's previous block to finish on the
//! GPU, then reads the block into it ([`DeviceReader`]: cuFile, or direct reads staged through
//! page-locked memory) while the GPU still computes the block before. Every weight keeps one
//! device address (block `i` always uses the same slot); passes run op by op, not as graphs
//! (the reads sit between the launches).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use tritium_native_gds::cache::{Place, Schedule};
use tritium_native_gds::gds::DeviceReader;
use tritium_native_gds::io::WeightFile;

use super::*;
use crate::model::FileSpan;

/// Bytes of a Q6_K block in its file.
const Q6K_BLOCK: usize = 210;
/// Weights of a block start at multiples of this inside the block's buffer.
const WEIGHT_ALIGN: usize = 256;

/// A weight registered by location.
pub(super) struct Deferred {
    /// Its index among the backend's weights.
    pub(super) weight: usize,
    pub(super) layer: usize,
    pub(super) spans: Vec<FileSpan>,
    /// Bytes in the file (the first `raw_len` bytes of the spans).
    pub(super) raw_len: usize,
    /// Bytes on the device (Q6_K in 224-byte slots).
    pub(super) dev_len: usize,
    pub(super) q6k: bool,
}

pub(super) struct Streamer {
    schedule: Schedule,
    /// Per block: its weights (indices into `deferred`) and their offsets in the block's buffer.
    layers: Vec<Vec<(usize, usize)>>,
    deferred: Vec<Deferred>,
    /// The streamed block of each streamed weight (by weight index).
    streamed: HashMap<usize, usize>,
    files: HashMap<PathBuf, WeightFile>,
    reader: DeviceReader,
    /// The resident blocks' buffers (held for their memory; the weights point into them).
    #[allow(dead_code)]
    resident: Vec<DeviceBuffer>,
    slots: Vec<DeviceBuffer>,
    /// The block each slot holds.
    holds: Vec<Option<usize>>,
    /// Recorded after the last queued op of each slot's block.
    released: Vec<Option<Event>>,
    current: Option<usize>,
    /// Q6_K's file bytes on their way to the padded layout.
    raw: Option<DeviceBuffer>,
    raw_free: Option<Event>,
    /// Bytes of GPU memory held (resident blocks, slots, staging), and bytes read so far.
    pub(super) bytes: u64,
    pub(super) bytes_read: u64,
    /// Per block: what reading it into its slot cost, since the last [`StreamStats`] reset.
    timing: Vec<BlockTiming>,
}

/// What the reads of one streamed block cost the host thread that queues the passes.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct BlockTiming {
    /// Times the block was read into its slot.
    pub reads: u64,
    pub bytes: u64,
    /// Seconds spent waiting for the GPU to finish with the slot's previous block.
    pub slot_wait_s: f64,
    /// Seconds spent reading (cuFile reads complete; staged reads: the file reads, with the
    /// last copy still queued).
    pub read_s: f64,
}

/// What streaming blocks from storage does ([`CudaBackend::streaming`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct StreamStats {
    pub schedule: String,
    /// How bytes reach the device: cuFile, or staged through page-locked memory (and why).
    pub reader: String,
    /// GPU bytes held for the blocks (resident blocks, slots, staging).
    pub block_bytes_on_device: u64,
    /// Bytes read from storage since the model loaded (the resident blocks' first read
    /// included).
    pub bytes_read: u64,
    /// Per streamed block, since the last [`CudaBackend::reset_stream_timing`].
    pub blocks: Vec<(usize, BlockTiming)>,
}

impl Streamer {
    /// Whether any block is read from storage when used.
    pub(super) fn streams(&self) -> bool {
        !self.slots.is_empty()
    }

    pub(super) fn stats(&self) -> StreamStats {
        let what = match self.schedule {
            Schedule::AllResident => "every block resident".to_string(),
            Schedule::Cached { resident, slots } => format!(
                "blocks 0..{resident} resident, {} streamed through {slots} slots",
                self.layers.len() - resident
            ),
            Schedule::Streaming { slots } => {
                format!(
                    "all {} blocks streamed through {slots} slots",
                    self.layers.len()
                )
            }
        };
        let reader = match self.reader.staged_because() {
            Some(why) => format!("{} ({why})", self.reader.method()),
            None => self.reader.method().to_string(),
        };
        StreamStats {
            schedule: what,
            reader,
            block_bytes_on_device: self.bytes,
            bytes_read: self.bytes_read,
            blocks: (0..self.layers.len())
                .filter(|&l| self.schedule.place(l) != Place::Resident)
                .map(|l| (l, self.timing[l]))
                .collect(),
        }
    }

    pub(super) fn reset_timing(&mut self) {
        self.timing
            .iter_mut()
            .for_each(|t| *t = BlockTiming::default());
    }
}

impl CudaBackend {
    /// Place the deferred weights (after the last weight is loaded and the KV cache is
    /// allocated, so that the budget's remainder is known): the schedule, the resident blocks
    /// read now, the slots allocated. Every file range is checked first: a missing or short
    /// file fails the load before anything is read.
    pub(super) fn start_streaming(&mut self) -> Result<(), Error> {
        let budget = match self.vram_budget {
            Some(VramBudget::Bytes(b)) => b,
            // What this process holds now, and what the device has free, less the reserve.
            Some(VramBudget::Auto) => {
                let (free, _) = self.dev.memory().map_err(gds)?;
                (self.bytes + free as u64).saturating_sub(VramBudget::AUTO_RESERVE)
            }
            None => u64::MAX,
        };
        let deferred = std::mem::take(&mut self.deferred);
        let n_layers = deferred.iter().map(|d| d.layer + 1).max().unwrap_or(0);
        let mut layers = vec![Vec::new(); n_layers];
        let mut sizes = vec![0usize; n_layers];
        for (i, d) in deferred.iter().enumerate() {
            layers[d.layer].push((i, sizes[d.layer]));
            sizes[d.layer] = (sizes[d.layer] + d.dev_len).next_multiple_of(WEIGHT_ALIGN);
        }
        let raw_len = deferred
            .iter()
            .filter(|d| d.q6k)
            .map(|d| d.raw_len)
            .max()
            .unwrap_or(0);
        let fixed = self.bytes + raw_len as u64;
        let avail = budget.checked_sub(fixed).ok_or_else(|| {
            Error::from(BackendError::UnsupportedWeight {
                name: "the GPU memory budget".into(),
                why: format!(
                    "{budget} bytes is less than what stays on the device besides the blocks ({fixed} bytes: embeddings, output, norms, KV cache, staging)"
                ),
            })
        })?;
        let sizes64: Vec<u64> = sizes.iter().map(|&s| s as u64).collect();
        let schedule = Schedule::plan(&sizes64, avail, 2, false).map_err(|e| {
            let why = match e {
                tritium_native_gds::cache::BudgetError::TooSmall { need, largest, .. } => format!(
                    "{budget} bytes leaves {avail} for the blocks beside what stays on the device \
                     ({fixed} bytes), less than the two streaming slots of the largest block need \
                     ({need} bytes: 2 x {largest})"
                ),
                e => e.to_string(),
            };
            Error::from(BackendError::UnsupportedWeight {
                name: "the GPU memory budget".into(),
                why,
            })
        })?;
        let mut files: HashMap<PathBuf, WeightFile> = HashMap::new();
        for d in &deferred {
            let mut have = 0u64;
            for s in &d.spans {
                if !files.contains_key(&s.path) {
                    files.insert(s.path.clone(), WeightFile::open(&s.path).map_err(gds)?);
                }
                files[&s.path].check_range(s.offset, s.len).map_err(gds)?;
                have += s.len;
            }
            if have < d.raw_len as u64 {
                return Err(BackendError::UnsupportedWeight {
                    name: self.weights[d.weight].name.clone(),
                    why: format!("its files hold {have} bytes of the {} it needs", d.raw_len),
                }
                .into());
            }
        }
        let reader = DeviceReader::new(&self.dev, true, 64 << 20).map_err(gds)?;
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let mut resident = Vec::new();
        let mut base = vec![0u64; n_layers];
        let mut slots = Vec::new();
        let mut bytes = raw_len as u64;
        for (l, b) in base.iter_mut().enumerate() {
            match schedule.place(l) {
                Place::Resident => {
                    let buf = self.dev.alloc(sizes[l]).map_err(gds)?;
                    *b = buf.ptr();
                    bytes += sizes[l] as u64;
                    resident.push(buf);
                }
                Place::Slot(k) => {
                    while slots.len() <= k {
                        slots.push(self.dev.alloc(largest).map_err(gds)?);
                        bytes += largest as u64;
                    }
                    *b = slots[k].ptr();
                }
            }
        }
        let mut streamed = HashMap::new();
        for (l, ws) in layers.iter().enumerate() {
            for &(i, off) in ws {
                let d = &deferred[i];
                self.weights[d.weight].ptr = base[l] + off as u64;
                if schedule.place(l) != Place::Resident {
                    streamed.insert(d.weight, l);
                }
            }
        }
        let raw = match raw_len {
            0 => None,
            n => Some(self.dev.alloc(n).map_err(gds)?),
        };
        let n_slots = slots.len();
        let mut st = Streamer {
            schedule,
            layers,
            deferred,
            streamed,
            files,
            reader,
            resident,
            slots,
            holds: vec![None; n_slots],
            released: (0..n_slots).map(|_| None).collect(),
            current: None,
            raw,
            raw_free: None,
            bytes,
            bytes_read: 0,
            timing: vec![BlockTiming::default(); n_layers],
        };
        for (l, &b) in base.iter().enumerate() {
            if st.schedule.place(l) == Place::Resident {
                self.read_layer(&mut st, l, b)?;
            }
        }
        self.dev.synchronize().map_err(gds)?;
        self.bytes += bytes;
        self.streamer = Some(st);
        if n_slots > 0 {
            self.set_graphs(false);
        }
        Ok(())
    }

    /// Read block `l`'s weights into the buffer at `base` (Q6_K through the raw staging buffer
    /// and `pad_blocks`).
    fn read_layer(&mut self, st: &mut Streamer, l: usize, base: u64) -> Result<(), Error> {
        for &(i, off) in &st.layers[l] {
            let d = &st.deferred[i];
            let dst = base + off as u64;
            let target = match (&st.raw, d.q6k) {
                (Some(raw), true) => {
                    // The previous pad must have read the staging buffer.
                    if let Some(ev) = st.raw_free.take() {
                        ev.synchronize().map_err(gds)?;
                    }
                    raw.ptr()
                }
                _ => dst,
            };
            let mut done = 0usize;
            for s in &d.spans {
                if done >= d.raw_len {
                    break;
                }
                let take = (s.len as usize).min(d.raw_len - done);
                st.reader
                    .read(
                        &self.dev,
                        &st.files[&s.path],
                        s.offset,
                        take as u64,
                        target + done as u64,
                    )
                    .map_err(gds)?;
                done += take;
            }
            st.bytes_read += done as u64;
            if d.q6k {
                let blocks = d.raw_len / Q6K_BLOCK;
                let args = [
                    Arg::Ptr(target),
                    Arg::Ptr(dst),
                    Arg::U32(blocks as u32),
                    Arg::U32(Q6K_BLOCK as u32),
                    Arg::U32(Q6K_SLOT as u32),
                ];
                self.launch("pad_blocks", (blocks.div_ceil(4), 1), 128, &args)?;
                st.raw_free = Some(self.dev.record().map_err(gds)?);
            }
        }
        Ok(())
    }

    /// Before ops that use `weights`: the streamed blocks among them in their slots.
    pub(super) fn ensure_weights(
        &mut self,
        weights: impl IntoIterator<Item = Weight>,
    ) -> Result<(), Error> {
        let Some(mut st) = self.streamer.take_if(|s| s.streams()) else {
            return Ok(());
        };
        let mut result = Ok(());
        for w in weights {
            if let Some(&l) = st.streamed.get(&(w.0 as usize)) {
                result = self.ensure_layer(&mut st, l);
                if result.is_err() {
                    break;
                }
            }
        }
        self.streamer = Some(st);
        result
    }

    fn ensure_layer(&mut self, st: &mut Streamer, l: usize) -> Result<(), Error> {
        if st.current == Some(l) {
            return Ok(());
        }
        // Leaving a streamed block: its last op is queued.
        if let Some(Place::Slot(k)) = st.current.map(|c| st.schedule.place(c)) {
            st.released[k] = Some(self.dev.record().map_err(gds)?);
        }
        st.current = Some(l);
        let Place::Slot(k) = st.schedule.place(l) else {
            return Ok(());
        };
        if st.holds[k] == Some(l) {
            return Ok(());
        }
        let t0 = Instant::now();
        if let Some(ev) = st.released[k].take() {
            ev.synchronize().map_err(gds)?;
        }
        let t1 = Instant::now();
        st.holds[k] = None;
        let base = st.slots[k].ptr();
        let before = st.bytes_read;
        self.read_layer(st, l, base)?;
        st.holds[k] = Some(l);
        let t = &mut st.timing[l];
        t.reads += 1;
        t.bytes += st.bytes_read - before;
        t.slot_wait_s += (t1 - t0).as_secs_f64();
        t.read_s += t1.elapsed().as_secs_f64();
        Ok(())
    }
}

/// The weights an op reads.
pub(super) fn op_weights(op: &Op) -> Option<Weight> {
    match *op {
        Op::MatMul { w, .. } | Op::BitLinear { w, .. } => Some(w),
        Op::Embed { table, .. } => Some(table),
        _ => None,
    }
}
