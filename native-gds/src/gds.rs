//! Weight bytes from files into device memory. Two paths, the one taken reported:
//! - cuFile (GPUDirect Storage) where libcufile loads and its driver opens: `cuFileRead` from a
//!   file opened `O_DIRECT` straight into device memory (DMA from NVMe where the `nvidia-fs`
//!   module is loaded; cuFile's own compatibility mode, which stages through host memory,
//!   where it is not);
//! - staged: aligned direct reads into two page-locked host buffers and asynchronous copies on
//!   the device's stream, the next read overlapping the current copy (any CUDA host).

use std::collections::HashMap;
use std::os::unix::io::AsRawFd;
use std::sync::OnceLock;

use cudarc::cufile::{result as cufile, sys as cufile_sys};

use crate::io::{AlignedSpan, ReadPath, WeightFile, IO_ALIGN};
use crate::{Device, Event, GdsError, HostBuffer};

/// How a [`DeviceReader`] moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMethod {
    CuFile,
    Staged,
}

impl std::fmt::Display for ReadMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadMethod::CuFile => "cuFile (GPUDirect Storage)",
            ReadMethod::Staged => {
                "staged (direct reads into page-locked buffers, asynchronous copies)"
            }
        })
    }
}

/// libcufile loaded and its driver opened, once per process (or why not).
fn cufile_driver() -> Result<(), String> {
    static OPEN: OnceLock<Result<(), String>> = OnceLock::new();
    OPEN.get_or_init(|| {
        crate::libs::load_cufile().map_err(|e| e.to_string())?;
        cufile::driver_open().map_err(|e| format!("cuFileDriverOpen failed: {e}"))
    })
    .clone()
}

/// Reads file ranges into device memory (of the device it was made for, passed to each call).
pub struct DeviceReader {
    method: ReadMethod,
    staged_because: Option<String>,
    /// Bytes of each staging buffer (allocated at once for the staged path, on the first
    /// page-cache file for the cuFile path).
    staging_bytes: usize,
    staging: Vec<HostBuffer>,
    pending: Vec<Option<Event>>,
    /// cuFile handles by file descriptor.
    handles: HashMap<i32, cufile_sys::CUfileHandle_t>,
}

impl DeviceReader {
    /// A reader that uses cuFile where `cufile` is asked for and available, else staged reads
    /// through two page-locked buffers of `staging_bytes` each (rounded up to [`IO_ALIGN`]).
    pub fn new(dev: &Device, cufile: bool, staging_bytes: usize) -> Result<DeviceReader, GdsError> {
        let (method, staged_because) = match cufile {
            false => (
                ReadMethod::Staged,
                Some("cuFile was not asked for".to_string()),
            ),
            true => match cufile_driver() {
                Ok(()) => (ReadMethod::CuFile, None),
                Err(why) => (ReadMethod::Staged, Some(why)),
            },
        };
        let bytes = staging_bytes.max(1).next_multiple_of(IO_ALIGN as usize);
        let staging = match method {
            ReadMethod::CuFile => Vec::new(),
            ReadMethod::Staged => vec![dev.host_buffer(bytes)?, dev.host_buffer(bytes)?],
        };
        Ok(DeviceReader {
            staging_bytes: bytes,
            method,
            staged_because,
            pending: staging.iter().map(|_| None).collect(),
            staging,
            handles: HashMap::new(),
        })
    }

    pub fn method(&self) -> ReadMethod {
        self.method
    }

    /// Why the staged path runs (cuFile not asked for, libcufile missing, its driver refused).
    pub fn staged_because(&self) -> Option<&str> {
        self.staged_because.as_deref()
    }

    /// Read `len` bytes of `file` at `offset` into device memory at `dst` (which holds at least
    /// `len` bytes). cuFile reads are complete on return; staged copies are queued on the
    /// device's stream, so the stream's later work sees the bytes.
    pub fn read(
        &mut self,
        dev: &Device,
        file: &WeightFile,
        offset: u64,
        len: u64,
        dst: u64,
    ) -> Result<(), GdsError> {
        file.check_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if self.method == ReadMethod::CuFile && file.read_path() == ReadPath::Direct {
            match self.register(file) {
                Ok(handle) => return self.read_cufile(dev, file, handle, offset, len, dst),
                // cuFile opened its driver but takes no file here (no nvidia-fs and compat
                // mode off in its configuration, or a file system it does not serve): every
                // later read is staged, and the reason reported.
                Err(why) => {
                    self.method = ReadMethod::Staged;
                    self.staged_because = Some(why);
                }
            }
        }
        if self.staging.is_empty() {
            // cuFile takes only O_DIRECT files; this one was opened through the page cache.
            let bytes = self.staging_bytes;
            self.staging = vec![dev.host_buffer(bytes)?, dev.host_buffer(bytes)?];
            self.pending = vec![None, None];
        }
        self.read_staged(dev, file, offset, len, dst)
    }

    /// The file's cuFile handle (registered on first use), or why cuFile refused it.
    fn register(&mut self, file: &WeightFile) -> Result<cufile_sys::CUfileHandle_t, String> {
        let fd = file.file().as_raw_fd();
        if let Some(&h) = self.handles.get(&fd) {
            return Ok(h);
        }
        let descr = cufile_sys::CUfileDescr_t {
            type_: cufile_sys::CUfileFileHandleType::CU_FILE_HANDLE_TYPE_OPAQUE_FD,
            handle: cufile_sys::CUfileDescr_t__bindgen_ty_1 { fd },
            fs_ops: std::ptr::null(),
        };
        let h = cufile::handle_register(&descr).map_err(|e| {
            format!(
                "cuFileHandleRegister refused {}: {e}",
                file.path().display()
            )
        })?;
        self.handles.insert(fd, h);
        Ok(h)
    }

    fn read_cufile(
        &mut self,
        dev: &Device,
        file: &WeightFile,
        handle: cufile_sys::CUfileHandle_t,
        offset: u64,
        len: u64,
        dst: u64,
    ) -> Result<(), GdsError> {
        let io_err = |what: &'static str, message: String| GdsError::Io {
            path: file.path().display().to_string(),
            what,
            message,
        };
        dev.bind()?;
        let mut done = 0u64;
        while done < len {
            // SAFETY: a registered handle; the caller's `dst` covers `len` device bytes.
            let n = unsafe {
                cufile::read(
                    handle,
                    dst as *mut std::ffi::c_void,
                    (len - done) as usize,
                    (offset + done) as i64,
                    done as i64,
                )
            }
            .map_err(|e| io_err("cuFileRead", format!("at byte {}: {e}", offset + done)))?;
            if n <= 0 {
                return Err(GdsError::Truncated {
                    path: file.path().display().to_string(),
                    offset,
                    len,
                    file_len: offset + done,
                });
            }
            done += n as u64;
        }
        Ok(())
    }

    fn read_staged(
        &mut self,
        dev: &Device,
        file: &WeightFile,
        offset: u64,
        len: u64,
        dst: u64,
    ) -> Result<(), GdsError> {
        let mut done = 0u64;
        let mut b = 0;
        while done < len {
            let at = offset + done;
            let skip = at % IO_ALIGN;
            let take = (self.staging[b].bytes() as u64 - skip).min(len - done);
            let span = AlignedSpan::covering(at, take).expect("inside the file");
            if let Some(ev) = self.pending[b].take() {
                ev.synchronize()?;
            }
            file.read_span(span, self.staging[b].as_mut_slice())?;
            dev.upload_pinned(dst + done, &self.staging[b], skip as usize, take as usize)?;
            self.pending[b] = Some(dev.record()?);
            done += take;
            b = (b + 1) % self.staging.len();
        }
        Ok(())
    }

    /// Wait until every queued copy is done.
    pub fn finish(&mut self) -> Result<(), GdsError> {
        for ev in self.pending.iter_mut().filter_map(Option::take) {
            ev.synchronize()?;
        }
        Ok(())
    }
}

impl Drop for DeviceReader {
    fn drop(&mut self) {
        let _ = self.finish();
        for (_, h) in self.handles.drain() {
            // SAFETY: a handle this reader registered, not used after this.
            unsafe { cufile::handle_deregister(h) }.ok();
        }
    }
}
