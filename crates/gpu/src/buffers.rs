//! Buffers: storage (read-only or read-write), uniforms, and small asynchronous readbacks.

use wgpu::util::DeviceExt;

use super::{GpuContext, GpuError, PoolStats, Pooled};

impl GpuContext {
    /// A storage buffer holding `bytes` (padded with zeros to a multiple of 4).
    pub fn storage_init(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer, GpuError> {
        let padded;
        let contents = if bytes.len() % 4 == 0 && !bytes.is_empty() {
            bytes
        } else {
            let mut v = bytes.to_vec();
            v.resize(bytes.len().next_multiple_of(4).max(4), 0);
            padded = v;
            &padded
        };
        self.check_size(label, contents.len() as u64)?;
        // In the browser a buffer mapped at creation is filled through a copy held in wasm
        // memory; `writeBuffer` reads the bytes where they are, so loading a model does not
        // need a second copy of each tensor in wasm memory.
        if cfg!(target_arch = "wasm32") {
            let buffer = self.storage(label, contents.len() as u64)?;
            self.queue.write_buffer(&buffer, 0, contents);
            return Ok(buffer);
        }
        let buffer = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
            });
        self.keep(&buffer);
        Ok(buffer)
    }

    /// A zeroed read-write storage buffer of `size` bytes (rounded up to a multiple of 4).
    pub fn storage(&self, label: &str, size: u64) -> Result<wgpu::Buffer, GpuError> {
        let size = size.next_multiple_of(4).max(4);
        self.check_size(label, size)?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        self.keep(&buffer);
        Ok(buffer)
    }

    /// A uniform buffer holding one `#[repr(C)]` value, from the pool; update it with
    /// [`GpuContext::write`].
    pub fn uniform<T: bytemuck::Pod>(&self, label: &str, value: &T) -> Pooled {
        let usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let bytes = bytemuck::bytes_of(value);
        let buffer = self.pooled(label, bytes.len() as u64, usage);
        self.queue.write_buffer(&buffer, 0, bytes);
        buffer
    }

    /// A read-write storage buffer of at least `size` bytes from the pool, for space an op
    /// writes before it reads (its contents are whatever its last user left).
    pub fn scratch(&self, label: &str, size: u64) -> Result<Pooled, GpuError> {
        let size = size.next_multiple_of(4).max(4);
        self.check_size(label, size)?;
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC;
        Ok(self.pooled(label, size, usage))
    }

    /// A readback buffer of at least `size` bytes from the pool.
    pub fn staging(&self, size: u64) -> Pooled {
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        self.pooled("readback", size.next_multiple_of(4).max(4), usage)
    }

    /// What the buffer pool has made, reused and holds.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Release the pool's free buffers (those in use stay with their owners).
    pub fn trim_pool(&self) {
        self.pool.trim();
    }

    fn pooled(&self, label: &str, size: u64, usage: wgpu::BufferUsages) -> Pooled {
        self.pool.take(usage, size, |class| {
            let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: class,
                usage,
                mapped_at_creation: false,
            });
            self.keep(&buffer);
            buffer
        })
    }

    /// Queue a write of plain data into a buffer at `offset`.
    pub fn write<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, offset: u64, data: &[T]) {
        self.queue
            .write_buffer(buffer, offset, bytemuck::cast_slice(data));
    }

    fn check_size(&self, what: &str, bytes: u64) -> Result<(), GpuError> {
        if bytes > self.limits.max_buffer_size {
            return Err(GpuError::TooLarge {
                what: what.to_string(),
                bytes,
                limit: self.limits.max_buffer_size,
            });
        }
        Ok(())
    }

    /// Copy `len` bytes at `offset` of `buffer` back to the CPU. Asynchronous (`mapAsync` in the
    /// browser); natively it polls the device until the copy is done.
    pub async fn read_bytes(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        let size = len.next_multiple_of(4).max(4);
        let staging = self.staging(size);
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("readback"),
            });
        enc.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        self.queue.submit([enc.finish()]);
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.poll_wait();
        rx.await
            .map_err(|_| GpuError::Readback("the map callback was dropped".into()))?
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        // Unmapped on every path: the buffer goes back to the pool.
        let out = staging
            .slice(..)
            .get_mapped_range()
            .map(|view| view[..len as usize].to_vec())
            .map_err(|e| GpuError::Readback(e.to_string()));
        staging.unmap();
        out
    }

    /// Read back `n` f32 values starting at element `first`.
    pub async fn read_f32(
        &self,
        buffer: &wgpu::Buffer,
        first: u64,
        n: u64,
    ) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_bytes(buffer, first * 4, n * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Natively, block until the submission `index` is done and its callbacks ran; in the
    /// browser the event loop does this.
    pub fn poll_until(&self, index: wgpu::SubmissionIndex) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.device.poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            });
        }
        #[cfg(target_arch = "wasm32")]
        let _ = index;
    }

    /// Natively, block until submitted work is done; in the browser the event loop does this.
    pub fn poll_wait(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
        }
    }
}
