//! Which layers' weights live in GPU memory, under a byte budget: the schedules of a forward
//! pass that visits layers 0, 1, ..., n - 1 once per pass, and the LRU cache they use. Pure
//! bookkeeping (no device calls), so that it is tested on any machine; the CUDA backend performs
//! the loads it asks for.
//!
//! - [`Schedule::AllResident`]: every layer fits; each is loaded once.
//! - [`Schedule::Cached`]: the first layers that fit after two streaming slots are reserved stay
//!   resident (pinned: an LRU over a cyclic pass would evict every layer just before its next
//!   use), the rest pass through the slots, the next one read while the current one computes.
//! - [`Schedule::Streaming`]: nothing stays; `slots` buffers (two or three) of the largest
//!   layer's size take the layers in turn.

use std::collections::HashMap;

/// What a budget allows for a model of these layer sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    AllResident,
    /// Layers `0..resident` stay; the others stream through `slots` slots.
    Cached {
        resident: usize,
        slots: usize,
    },
    Streaming {
        slots: usize,
    },
}

/// A budget too small for the model, or a layer too large for any slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("a GPU memory budget of {budget} bytes is smaller than two layers ({need} bytes: two streaming slots of the largest layer, {largest} bytes)")]
    TooSmall {
        budget: u64,
        need: u64,
        largest: u64,
    },
    #[error("the model has no layers")]
    NoLayers,
}

impl Schedule {
    /// The schedule for layers of `sizes` bytes within `budget` bytes: all resident where they
    /// fit, else resident layers plus two slots, else (`stream_only`, or nothing fits beside the
    /// slots) streaming through `slots` slots (at least 2).
    pub fn plan(
        sizes: &[u64],
        budget: u64,
        slots: usize,
        stream_only: bool,
    ) -> Result<Schedule, BudgetError> {
        let largest = *sizes.iter().max().ok_or(BudgetError::NoLayers)?;
        let total: u64 = sizes.iter().sum();
        if total <= budget && !stream_only {
            return Ok(Schedule::AllResident);
        }
        let slots = slots.max(2);
        let need = largest.saturating_mul(slots as u64);
        if need > budget {
            let two = largest.saturating_mul(2);
            if two > budget {
                return Err(BudgetError::TooSmall {
                    budget,
                    need: two,
                    largest,
                });
            }
            return Ok(Schedule::Streaming { slots: 2 });
        }
        if stream_only {
            return Ok(Schedule::Streaming { slots });
        }
        let mut left = budget - need;
        let mut resident = 0;
        for &s in sizes {
            if s > left {
                break;
            }
            left -= s;
            resident += 1;
        }
        Ok(match resident {
            0 => Schedule::Streaming { slots },
            _ => Schedule::Cached { resident, slots },
        })
    }

    /// Where layer `i` lives in this schedule.
    pub fn place(&self, i: usize) -> Place {
        match *self {
            Schedule::AllResident => Place::Resident,
            Schedule::Cached { resident, .. } if i < resident => Place::Resident,
            Schedule::Cached { resident, slots } => Place::Slot((i - resident) % slots),
            Schedule::Streaming { slots } => Place::Slot(i % slots),
        }
    }

    /// Bytes of GPU memory the schedule holds for layers of `sizes`.
    pub fn bytes(&self, sizes: &[u64]) -> u64 {
        let largest = sizes.iter().copied().max().unwrap_or(0);
        match *self {
            Schedule::AllResident => sizes.iter().sum(),
            Schedule::Cached { resident, slots } => {
                sizes[..resident].iter().sum::<u64>() + largest * slots as u64
            }
            Schedule::Streaming { slots } => largest * slots as u64,
        }
    }

    /// Bytes read from storage per pass once the resident layers are loaded.
    pub fn streamed_per_pass(&self, sizes: &[u64]) -> u64 {
        match *self {
            Schedule::AllResident => 0,
            Schedule::Cached { resident, .. } => sizes[resident..].iter().sum(),
            Schedule::Streaming { .. } => sizes.iter().sum(),
        }
    }
}

/// Where a layer's weights are during a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In its own buffer for the model's life.
    Resident,
    /// In streaming slot `k`, read before each use.
    Slot(usize),
}

/// An LRU set of entries (layers) with byte sizes under a budget; entries in use are pinned and
/// never evicted. The caller loads what [`LayerCache::admit`] admits and frees what it evicts.
#[derive(Debug)]
pub struct LayerCache {
    budget: u64,
    used: u64,
    clock: u64,
    entries: HashMap<usize, Entry>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    bytes: u64,
    last_use: u64,
    pins: u32,
}

/// The outcome of [`LayerCache::admit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Already resident (now the most recently used).
    Hit,
    /// Load it; first free these (least recently used first).
    Load { evict: Vec<usize> },
    /// It cannot fit even after evicting every unpinned entry.
    NoRoom,
}

impl LayerCache {
    pub fn new(budget: u64) -> LayerCache {
        LayerCache {
            budget,
            used: 0,
            clock: 0,
            entries: HashMap::new(),
        }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn contains(&self, key: usize) -> bool {
        self.entries.contains_key(&key)
    }

    /// Resident keys, least recently used first.
    pub fn resident(&self) -> Vec<usize> {
        let mut v: Vec<_> = self.entries.iter().map(|(&k, e)| (e.last_use, k)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, k)| k).collect()
    }

    /// Make `key` (of `bytes`) resident, evicting least recently used unpinned entries where
    /// needed. On `Load`, the entry is counted as resident at once (the caller loads it).
    pub fn admit(&mut self, key: usize, bytes: u64) -> Admit {
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(&key) {
            e.last_use = self.clock;
            return Admit::Hit;
        }
        let mut evict = Vec::new();
        if self.used + bytes > self.budget {
            let mut free = self.budget.saturating_sub(self.used);
            let candidates: Vec<usize> = self
                .resident()
                .into_iter()
                .filter(|k| self.entries[k].pins == 0)
                .collect();
            for k in candidates {
                if free >= bytes {
                    break;
                }
                free += self.entries[&k].bytes;
                evict.push(k);
            }
            if free < bytes {
                return Admit::NoRoom;
            }
            for k in &evict {
                self.used -= self.entries.remove(k).expect("resident").bytes;
            }
        }
        self.used += bytes;
        self.entries.insert(
            key,
            Entry {
                bytes,
                last_use: self.clock,
                pins: 0,
            },
        );
        Admit::Load { evict }
    }

    /// Keep `key` from eviction until [`LayerCache::unpin`] (a layer being computed or read).
    pub fn pin(&mut self, key: usize) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.pins += 1;
        }
    }

    pub fn unpin(&mut self, key: usize) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.pins = e.pins.saturating_sub(1);
        }
    }

    /// Lower the budget (more memory for activations or the KV cache): the unpinned entries to
    /// free, least recently used first, so that the rest fits.
    pub fn shrink(&mut self, budget: u64) -> Vec<usize> {
        self.budget = budget;
        let mut evict = Vec::new();
        for k in self.resident() {
            if self.used <= budget {
                break;
            }
            if self.entries[&k].pins == 0 {
                self.used -= self.entries.remove(&k).expect("resident").bytes;
                evict.push(k);
            }
        }
        evict
    }

    /// Drop `key` (its buffer freed by the caller).
    pub fn remove(&mut self, key: usize) {
        if let Some(e) = self.entries.remove(&key) {
            self.used -= e.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_follow_the_budget() {
        let sizes = [100u64; 8];
        assert_eq!(
            Schedule::plan(&sizes, 800, 2, false),
            Ok(Schedule::AllResident)
        );
        // Half over the budget: 400 bytes = two slots + two resident layers.
        assert_eq!(
            Schedule::plan(&sizes, 400, 2, false),
            Ok(Schedule::Cached {
                resident: 2,
                slots: 2
            })
        );
        // Two layers' worth: streaming only.
        assert_eq!(
            Schedule::plan(&sizes, 200, 3, false),
            Ok(Schedule::Streaming { slots: 2 })
        );
        assert_eq!(
            Schedule::plan(&sizes, 250, 2, false),
            Ok(Schedule::Streaming { slots: 2 })
        );
        assert_eq!(
            Schedule::plan(&sizes, 199, 2, false),
            Err(BudgetError::TooSmall {
                budget: 199,
                need: 200,
                largest: 100
            })
        );
        assert_eq!(
            Schedule::plan(&sizes, 10_000, 3, true),
            Ok(Schedule::Streaming { slots: 3 })
        );
        assert_eq!(
            Schedule::plan(&[], 100, 2, false),
            Err(BudgetError::NoLayers)
        );
    }

    /// Whatever the budget, the memory a schedule holds stays within it, every layer has a
    /// place, and consecutive streamed layers never share a slot (the next one's read overlaps
    /// the current one's compute).
    #[test]
    fn schedules_stay_within_their_budget() {
        let sizes: Vec<u64> = (0..12).map(|i| 1000 + (i * 37 % 5) * 100).collect();
        let total: u64 = sizes.iter().sum();
        for budget in (2000..=total + 500).step_by(333) {
            for slots in [2, 3] {
                let Ok(s) = Schedule::plan(&sizes, budget, slots, false) else {
                    continue;
                };
                assert!(s.bytes(&sizes) <= budget, "{s:?} at {budget}");
                let streamed: Vec<usize> = (0..sizes.len())
                    .filter_map(|i| match s.place(i) {
                        Place::Slot(k) => Some(k),
                        Place::Resident => None,
                    })
                    .collect();
                for w in streamed.windows(2) {
                    assert_ne!(w[0], w[1], "{s:?}");
                }
                assert_eq!(
                    s.streamed_per_pass(&sizes),
                    (0..sizes.len())
                        .filter(|&i| s.place(i) != Place::Resident)
                        .map(|i| sizes[i])
                        .sum::<u64>()
                );
            }
        }
    }

    #[test]
    fn the_cache_evicts_least_recently_used_and_spares_pinned() {
        let mut c = LayerCache::new(300);
        assert_eq!(c.admit(0, 100), Admit::Load { evict: vec![] });
        assert_eq!(c.admit(1, 100), Admit::Load { evict: vec![] });
        assert_eq!(c.admit(2, 100), Admit::Load { evict: vec![] });
        assert_eq!(c.admit(0, 100), Admit::Hit);
        // 1 is now the least recently used.
        assert_eq!(c.admit(3, 100), Admit::Load { evict: vec![1] });
        c.pin(2);
        assert_eq!(c.admit(4, 150), Admit::Load { evict: vec![0, 3] });
        assert_eq!(c.used(), 250);
        c.pin(4);
        assert_eq!(c.admit(5, 100), Admit::NoRoom);
        assert_eq!(c.used(), 250);
        c.unpin(2);
        assert_eq!(c.admit(5, 100), Admit::Load { evict: vec![2] });
        assert_eq!(c.resident(), vec![4, 5]);
        assert_eq!(c.shrink(120), vec![5]);
        assert_eq!(c.used(), 150);
        c.unpin(4);
        assert_eq!(c.shrink(100), vec![4]);
        assert_eq!(c.used(), 0);
    }
}
