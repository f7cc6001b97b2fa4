//! A CUDA device with one stream: memory, copies, kernel launches, events and graphs.
//!
//! Everything runs in order on the device's stream. The context is made current on the
//! calling thread by [`Device::bind`] (callers that move between threads bind first).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};

use crate::GdsError;

/// Device buffers start at multiples of this (cuFile reads into them directly).
pub const ALIGN: usize = 4096;

/// What a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability `(major, minor)`: `(9, 0)` for an H100 or H200.
    pub capability: (i32, i32),
    pub total_bytes: usize,
    pub multiprocessors: i32,
}

impl DeviceInfo {
    /// The NVRTC architecture name (`sm_90`).
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.capability.0, self.capability.1)
    }
}

/// A CUDA device and the stream its work runs on.
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: sys::CUstream,
    info: DeviceInfo,
}

// SAFETY: the stream handle is used only through the device, whose context each user binds
// to its own thread first ([`Device::bind`]); CUDA handles may be used from any thread.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// How many CUDA devices the driver reports (an error when there is no driver).
    pub fn count() -> Result<usize, GdsError> {
        if !crate::libs::driver_present() {
            return Err(GdsError::NoDriver);
        }
        result::init().map_err(GdsError::driver("cuInit"))?;
        Ok(result::device::get_count().map_err(GdsError::driver("device count"))? as usize)
    }

    /// Open device `ordinal` (its primary context) with a new non-blocking stream.
    pub fn open(ordinal: usize) -> Result<Device, GdsError> {
        let count = Device::count()?;
        if ordinal >= count {
            return Err(GdsError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(GdsError::driver("context"))?;
        ctx.bind_to_thread().map_err(GdsError::driver("context"))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(GdsError::driver("stream"))?;
        let attr = |a| {
            // SAFETY: a valid device handle and attribute.
            unsafe { result::device::get_attribute(ctx.cu_device(), a) }
                .map_err(GdsError::driver("device attribute"))
        };
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(GdsError::driver("device name"))?,
            capability: (
                attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            total_bytes: ctx.total_mem().map_err(GdsError::driver("memory size"))?,
            multiprocessors: attr(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )?,
        };
        Ok(Device { ctx, stream, info })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Make the device's context current on this thread.
    pub fn bind(&self) -> Result<(), GdsError> {
        self.ctx
            .bind_to_thread()
            .map_err(GdsError::driver("context"))
    }

    pub(crate) fn context(&self) -> Arc<CudaContext> {
        self.ctx.clone()
    }

    /// The raw stream (for libraries that run on it: cuBLAS).
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }

    /// `(free, total)` device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), GdsError> {
        self.bind()?;
        result::mem_get_info().map_err(GdsError::driver("memory info"))
    }

    /// A zeroed device buffer of `bytes` (at least 1) starting at a multiple of [`ALIGN`].
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, GdsError> {
        self.bind()?;
        let size = bytes
            .max(1)
            .checked_add(ALIGN)
            .ok_or(GdsError::OutOfMemory {
                bytes,
                free: 0,
                total: self.info.total_bytes,
            })?;
        // SAFETY: a plain allocation, freed by the buffer's drop.
        let base = match unsafe { result::malloc_sync(size) } {
            Ok(p) => p,
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                let (free, total) = result::mem_get_info().unwrap_or((0, self.info.total_bytes));
                return Err(GdsError::OutOfMemory { bytes, free, total });
            }
            Err(e) => return Err(GdsError::driver("allocation")(e)),
        };
        let ptr = base.next_multiple_of(ALIGN as u64);
        let buf = DeviceBuffer {
            ctx: self.ctx.clone(),
            base,
            ptr,
            bytes,
        };
        // SAFETY: `ptr .. ptr + bytes` lies inside the allocation.
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }.map_err(GdsError::driver("memset"))?;
        Ok(buf)
    }

    /// Copy `src` to device address `dst` now (the stream's earlier work finishes first).
    pub fn upload(&self, dst: u64, src: &[u8]) -> Result<(), GdsError> {
        self.bind()?;
        self.synchronize()?;
        // SAFETY: the caller's `dst` addresses at least `src.len()` bytes of a live buffer.
        unsafe { result::memcpy_htod_sync(dst, src) }.map_err(GdsError::driver("upload"))
    }

    /// Queue a copy of `src` (ordinary host memory, at most 64 KiB) to `dst` on the stream.
    /// The driver stages small pageable copies before it returns, so `src` may be reused at
    /// once.
    pub fn upload_small(&self, dst: u64, src: &[u8]) -> Result<(), GdsError> {
        debug_assert!(src.len() <= 65536);
        // SAFETY: as `upload`; the staging makes the host slice free to reuse on return.
        unsafe { result::memcpy_htod_async(dst, src, self.stream) }
            .map_err(GdsError::driver("upload"))
    }

    /// Queue a copy of `bytes` from device address `src` into `dst` (page-locked).
    pub fn download(&self, dst: &mut HostBuffer, src: u64, bytes: usize) -> Result<(), GdsError> {
        assert!(bytes <= dst.bytes, "download past the host buffer");
        // SAFETY: `dst` holds `bytes`; the caller's `src` addresses as many device bytes.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.ptr as *mut c_void, src, bytes, self.stream).result()
        }
        .map_err(GdsError::driver("download"))
    }

    /// Queue a copy of `bytes` of `src` (page-locked) from `offset` to device address `dst`;
    /// `src` must not be written until the copy is done (an [`Event`] recorded after it).
    pub fn upload_pinned(
        &self,
        dst: u64,
        src: &HostBuffer,
        offset: usize,
        bytes: usize,
    ) -> Result<(), GdsError> {
        assert!(offset + bytes <= src.bytes, "upload past the host buffer");
        // SAFETY: `src` holds the range; the caller's `dst` addresses as many device bytes.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                src.ptr.add(offset) as *const c_void,
                bytes,
                self.stream,
            )
            .result()
        }
        .map_err(GdsError::driver("upload"))
    }

    /// Queue a device-to-device copy.
    pub fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), GdsError> {
        // SAFETY: the caller's addresses each cover `bytes` of live buffers.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(GdsError::driver("copy"))
    }

    /// Queue a fill of `bytes` at `dst` with the byte `value`.
    pub fn fill(&self, dst: u64, value: u8, bytes: usize) -> Result<(), GdsError> {
        // SAFETY: the caller's address covers `bytes` of a live buffer.
        unsafe { result::memset_d8_async(dst, value, bytes, self.stream) }
            .map_err(GdsError::driver("fill"))
    }

    /// Queue a kernel.
    pub fn launch(
        &self,
        kernel: &Kernel,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<(), GdsError> {
        let mut slots: [u64; 24] = [0; 24];
        assert!(args.len() <= slots.len(), "too many kernel arguments");
        for (s, a) in slots.iter_mut().zip(args) {
            *s = a.bits();
        }
        let mut params: [*mut c_void; 24] = [std::ptr::null_mut(); 24];
        for (p, s) in params.iter_mut().zip(slots.iter_mut()) {
            *p = s as *mut u64 as *mut c_void;
        }
        // SAFETY: one slot per kernel parameter, each holding the parameter's bytes (little
        // endian, at most 8); the kernel's pointers are the caller's live buffers.
        unsafe {
            result::launch_kernel(
                kernel.f,
                grid,
                block,
                shared_bytes,
                self.stream,
                &mut params[..args.len()],
            )
        }
        .map_err(|e| GdsError::Driver {
            what: "kernel launch",
            message: format!("{}: {e}", kernel.name),
        })
    }

    /// Record an event after the work queued so far.
    pub fn record(&self) -> Result<Event, GdsError> {
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(GdsError::driver("event"))?;
        // SAFETY: a new event on our stream.
        unsafe { result::event::record(e, self.stream) }.map_err(GdsError::driver("event"))?;
        Ok(Event {
            e,
            ctx: self.ctx.clone(),
        })
    }

    /// Wait for everything queued.
    pub fn synchronize(&self) -> Result<(), GdsError> {
        // SAFETY: our stream.
        unsafe { result::stream::synchronize(self.stream) }.map_err(GdsError::driver("synchronize"))
    }

    /// Start capturing the stream's work into a graph (nothing runs until it is launched).
    pub fn begin_capture(&self) -> Result<(), GdsError> {
        // SAFETY: our stream; only this thread queues work while it captures.
        unsafe {
            result::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(GdsError::driver("graph capture"))
    }

    /// End the capture and make the graph launchable.
    pub fn end_capture(&self) -> Result<Graph, GdsError> {
        // SAFETY: ends the capture begun on our stream.
        let graph = unsafe { result::stream::end_capture(self.stream) }
            .map_err(GdsError::driver("graph capture"))?;
        // SAFETY: a graph just captured.
        let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
        let exec = match exec {
            Ok(x) => x,
            Err(e) => {
                // SAFETY: the graph is ours and not used again.
                unsafe { result::graph::destroy(graph) }.ok();
                return Err(GdsError::driver("graph instantiation")(e));
            }
        };
        Ok(Graph {
            graph,
            exec,
            ctx: self.ctx.clone(),
        })
    }

    /// Queue a captured graph.
    pub fn launch_graph(&self, g: &Graph) -> Result<(), GdsError> {
        // SAFETY: an instantiated graph of this context.
        unsafe { result::graph::launch(g.exec, self.stream) }
            .map_err(GdsError::driver("graph launch"))
    }

    /// A page-locked host buffer of `bytes`.
    pub fn host_buffer(&self, bytes: usize) -> Result<HostBuffer, GdsError> {
        self.bind()?;
        // SAFETY: freed by the buffer's drop.
        let ptr = unsafe { result::malloc_host(bytes.max(1), 0) }
            .map_err(GdsError::driver("page-locked allocation"))?;
        Ok(HostBuffer {
            ptr: ptr as *mut u8,
            bytes,
            ctx: self.ctx.clone(),
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: our stream, not used after this.
            unsafe {
                result::stream::synchronize(self.stream).ok();
                result::stream::destroy(self.stream).ok();
            }
        }
    }
}

/// A kernel argument: a device address or a 32-bit value.
#[derive(Copy, Clone, Debug)]
pub enum Arg {
    Ptr(u64),
    U32(u32),
    I32(i32),
    F32(f32),
}

impl Arg {
    fn bits(self) -> u64 {
        match self {
            Arg::Ptr(p) => p,
            Arg::U32(v) => u64::from(v),
            Arg::I32(v) => u64::from(v as u32),
            Arg::F32(v) => u64::from(v.to_bits()),
        }
    }
}

/// A kernel of a loaded module.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub(crate) f: sys::CUfunction,
    pub name: String,
}

// SAFETY: function handles are plain identifiers valid in any thread of the context.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

/// Device memory, freed when dropped.
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    base: sys::CUdeviceptr,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

// SAFETY: a device address, valid from any thread of the context.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// The device address of the first byte (a multiple of [`ALIGN`]).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: our allocation; freeing waits for work that uses it.
            unsafe { result::free_sync(self.base) }.ok();
        }
    }
}

/// Page-locked host memory (the target of asynchronous downloads).
pub struct HostBuffer {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: plain host memory owned by the buffer.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The contents (after the downloads into it are complete: wait for their [`Event`]).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `bytes` of host memory owned by the buffer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    /// The contents to write (no copy from or into it may be in flight: wait for its
    /// [`Event`]). Page-aligned, so direct reads may fill it.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: our allocation.
            unsafe { result::free_host(self.ptr as *mut c_void) }.ok();
        }
    }
}

/// A point in the stream's work.
pub struct Event {
    e: sys::CUevent,
    ctx: Arc<CudaContext>,
}

// SAFETY: event handles are usable from any thread of the context.
unsafe impl Send for Event {}

impl Event {
    /// Wait until the work before the event is done.
    pub fn synchronize(&self) -> Result<(), GdsError> {
        self.ctx
            .bind_to_thread()
            .map_err(GdsError::driver("context"))?;
        // SAFETY: a recorded event.
        unsafe { result::event::synchronize(self.e) }.map_err(GdsError::driver("event wait"))
    }

    /// Milliseconds from `self` to `later` (both complete).
    pub fn elapsed_ms(&self, later: &Event) -> Result<f32, GdsError> {
        // SAFETY: two recorded events.
        unsafe { result::event::elapsed(self.e, later.e) }.map_err(GdsError::driver("event time"))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: our event.
        unsafe { result::event::destroy(self.e) }.ok();
    }
}

/// A captured, instantiated graph.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    ctx: Arc<CudaContext>,
}

// SAFETY: graph handles are usable from any thread of the context.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: ours, not launched again.
            unsafe {
                result::graph::exec_destroy(self.exec).ok();
                result::graph::destroy(self.graph).ok();
            }
        }
    }
}
