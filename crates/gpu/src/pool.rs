//! The buffer pool: the small and short-lived buffers that ops and readbacks own (uniforms,
//! scratch space such as the attention's partial results, readback staging) come from here
//! and go back here when their owner is dropped, so that rebuilding ops (a forward pass of a
//! new batch size, a tape evicted and built again, a switch between decode paths) and
//! reading results back reuse buffers instead of allocating new ones. Weights, the KV cache
//! and activations are made once per model and do not pass through it.
//!
//! Buffers are kept by usage and size class (the next power of two from 256 bytes): a
//! request gets a buffer of its size's class, so it may be up to twice as large as asked for
//! (kernels bind whole buffers and never read past what their parameters say). Uniform
//! buffers are the exception, kept by their exact size (a multiple of 16): 256-byte uniforms
//! for 64-byte structs slow a decode by about 1% (most likely the driver copies a bound
//! uniform's whole range to constant memory at every dispatch). A
//! returned buffer keeps its contents: only uses that write before they read take pooled
//! buffers.
//! At most [`MAX_FREE_BYTES`] are kept free; beyond that a returned buffer is released.
//!
//! Reuse is safe while earlier submissions may still read a buffer: the queue orders a later
//! write (`write_buffer`, a copy, a dispatch) after the work submitted before it, and wgpu
//! keeps a dropped buffer alive until the GPU is done with it.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// Smallest size class, bytes (a uniform struct fits; storage offsets align to 256).
pub const MIN_CLASS: u64 = 256;
/// Most bytes of free buffers the pool keeps.
pub const MAX_FREE_BYTES: u64 = 64 << 20;

/// What the pool has done since it was made.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Buffers made because no free buffer of the class was there.
    pub created: u64,
    /// Requests served by a free buffer.
    pub reused: u64,
    /// Buffers free now, and their bytes.
    pub free: u64,
    pub free_bytes: u64,
    /// Buffers handed out and not returned yet, and their bytes.
    pub in_use: u64,
    pub in_use_bytes: u64,
}

#[derive(Default)]
struct Shelves {
    free: HashMap<(wgpu::BufferUsages, u64), Vec<wgpu::Buffer>>,
    stats: PoolStats,
}

/// Free buffers by (usage, size class).
#[derive(Default)]
pub struct BufferPool {
    shelves: Mutex<Shelves>,
}

/// The size class of a request of `size` bytes for buffers of `usage`.
pub fn size_class(usage: wgpu::BufferUsages, size: u64) -> u64 {
    if usage.contains(wgpu::BufferUsages::UNIFORM) {
        return size.max(16).next_multiple_of(16);
    }
    size.max(MIN_CLASS).next_power_of_two()
}

impl BufferPool {
    /// A free buffer of `usage` and the class of `size`, or one made by `make(class_size)`.
    pub fn take(
        self: &Arc<Self>,
        usage: wgpu::BufferUsages,
        size: u64,
        make: impl FnOnce(u64) -> wgpu::Buffer,
    ) -> Pooled {
        let class = size_class(usage, size);
        let found = {
            let mut s = self.lock();
            let found = s.free.get_mut(&(usage, class)).and_then(Vec::pop);
            match found {
                Some(_) => {
                    s.stats.reused += 1;
                    s.stats.free -= 1;
                    s.stats.free_bytes -= class;
                }
                None => s.stats.created += 1,
            }
            s.stats.in_use += 1;
            s.stats.in_use_bytes += class;
            found
        };
        Pooled {
            buffer: found.unwrap_or_else(|| make(class)),
            pool: self.clone(),
        }
    }

    /// Put `buffer` back on its shelf (or release it when the pool holds enough).
    fn give(&self, buffer: wgpu::Buffer) {
        let class = buffer.size();
        let mut s = self.lock();
        s.stats.in_use -= 1;
        s.stats.in_use_bytes -= class;
        if s.stats.free_bytes + class > MAX_FREE_BYTES {
            return;
        }
        s.stats.free += 1;
        s.stats.free_bytes += class;
        s.free
            .entry((buffer.usage(), class))
            .or_default()
            .push(buffer);
    }

    /// Release every free buffer.
    pub fn trim(&self) {
        let mut s = self.lock();
        s.free.clear();
        s.stats.free = 0;
        s.stats.free_bytes = 0;
    }

    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shelves> {
        // A panic while the lock was held left plain counters and lists behind: still usable.
        self.shelves.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A buffer from a [`BufferPool`], returned to it when dropped.
pub struct Pooled {
    buffer: wgpu::Buffer,
    pool: Arc<BufferPool>,
}

impl Deref for Pooled {
    type Target = wgpu::Buffer;

    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        // A handle to the same buffer goes back (wgpu buffers are shared handles).
        self.pool.give(self.buffer.clone());
    }
}

impl std::fmt::Debug for Pooled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled")
            .field("size", &self.buffer.size())
            .finish()
    }
}
