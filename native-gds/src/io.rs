//! Reading weight bytes from files in 4 KiB-aligned pieces, as cuFile and `O_DIRECT` want them:
//! a tensor's bytes at any offset are read as the aligned span that covers them
//! ([`AlignedSpan`]), and the caller takes the part it asked for. [`WeightFile`] opens a file
//! for direct reads (`O_DIRECT`, bypassing the page cache) where the file system allows it, and
//! through the page cache where it does not (tmpfs, some network file systems); which one it got
//! is reported ([`ReadPath`]). This is the host half of the streaming reads: the CUDA half reads
//! the same spans with cuFile or copies them from pinned staging memory.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use crate::GdsError;

/// The alignment of direct reads: offsets, lengths and buffer addresses.
pub const IO_ALIGN: u64 = 4096;

/// The aligned read covering `len` bytes at `offset`: it starts at `start` and is `len` bytes
/// long (both multiples of [`IO_ALIGN`]); the asked bytes begin `skip` bytes into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlignedSpan {
    pub start: u64,
    pub len: u64,
    pub skip: u64,
}

impl AlignedSpan {
    /// The span covering `[offset, offset + len)`; `None` where the end overflows.
    pub fn covering(offset: u64, len: u64) -> Option<AlignedSpan> {
        let end = offset.checked_add(len)?;
        let start = offset / IO_ALIGN * IO_ALIGN;
        let end = end.checked_next_multiple_of(IO_ALIGN)?;
        Some(AlignedSpan {
            start,
            len: end - start,
            skip: offset - start,
        })
    }
}

/// How a [`WeightFile`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    /// `O_DIRECT`: straight from the device into the buffer, no page cache.
    Direct,
    /// Through the page cache (the file system refused `O_DIRECT`).
    Buffered,
}

/// A host allocation aligned to [`IO_ALIGN`] (direct reads need aligned buffers), zeroed.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation; no aliasing outside borrows of self.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes (rounded up to [`IO_ALIGN`]; at least one page).
    pub fn new(len: usize) -> Result<AlignedBuf, GdsError> {
        let len = len.max(1).next_multiple_of(IO_ALIGN as usize);
        let layout =
            Layout::from_size_align(len, IO_ALIGN as usize).map_err(|_| GdsError::HostMemory {
                bytes: len,
                why: "not a valid allocation size".into(),
            })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            GdsError::HostMemory {
                bytes: len,
                why: "the allocator refused".into(),
            }
        })?;
        Ok(AlignedBuf { ptr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialized (zeroed) bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self is the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this size and alignment.
        unsafe {
            alloc::dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, IO_ALIGN as usize),
            )
        }
    }
}

/// A weight file opened for aligned reads.
pub struct WeightFile {
    file: File,
    path: PathBuf,
    len: u64,
    read_path: ReadPath,
}

impl WeightFile {
    /// Open `path` for direct reads, or buffered ones where the file system refuses `O_DIRECT`.
    pub fn open(path: &Path) -> Result<WeightFile, GdsError> {
        let open_err = |e: std::io::Error| GdsError::Io {
            path: path.display().to_string(),
            what: "open",
            message: e.to_string(),
        };
        let (file, read_path) = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => (f, ReadPath::Direct),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (File::open(path).map_err(open_err)?, ReadPath::Buffered)
            }
            Err(e) => return Err(open_err(e)),
        };
        let len = file.metadata().map_err(open_err)?.len();
        Ok(WeightFile {
            file,
            path: path.to_path_buf(),
            len,
            read_path,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn read_path(&self) -> ReadPath {
        self.read_path
    }

    /// The file descriptor (cuFile registers it).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Check that `[offset, offset + len)` lies inside the file.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), GdsError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GdsError::Truncated {
                path: self.path.display().to_string(),
                offset,
                len,
                file_len: self.len,
            }),
        }
    }

    /// Read `span` into the start of `buf` (at least `span.len` bytes, starting at a multiple
    /// of [`IO_ALIGN`]): the whole span, or up to the end of the file where the span passes it.
    /// Returns the bytes read.
    pub fn read_span(&self, span: AlignedSpan, buf: &mut [u8]) -> Result<usize, GdsError> {
        let want = usize::try_from(span.len).unwrap_or(usize::MAX);
        if buf.len() < want || buf.as_ptr() as u64 % IO_ALIGN != 0 {
            return Err(GdsError::HostMemory {
                bytes: want,
                why: format!(
                    "a staging buffer of {} bytes at {:p} is too small or not {IO_ALIGN}-byte aligned",
                    buf.len(),
                    buf.as_ptr()
                ),
            });
        }
        let avail = self.len.saturating_sub(span.start).min(span.len) as usize;
        let dst = &mut buf[..want];
        let mut done = 0;
        while done < avail {
            // Direct reads keep the length aligned; the file's last page comes back short.
            match self
                .file
                .read_at(&mut dst[done..], span.start + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(GdsError::Io {
                        path: self.path.display().to_string(),
                        what: "read",
                        message: format!("at byte {}: {e}", span.start + done as u64),
                    })
                }
            }
        }
        if done < avail {
            // The file shrank after it was opened.
            return Err(GdsError::Truncated {
                path: self.path.display().to_string(),
                offset: span.start,
                len: span.len,
                file_len: span.start + done as u64,
            });
        }
        Ok(done)
    }

    /// Read exactly `dst.len()` bytes at `offset` through `staging` (the covering aligned spans,
    /// a staging buffer's worth at a time).
    pub fn read_exact_at(
        &self,
        offset: u64,
        dst: &mut [u8],
        staging: &mut AlignedBuf,
    ) -> Result<(), GdsError> {
        self.check_range(offset, dst.len() as u64)?;
        let mut done = 0usize;
        while done < dst.len() {
            let at = offset + done as u64;
            let skip = at % IO_ALIGN;
            let room = staging.len() as u64 - skip;
            let take = room.min((dst.len() - done) as u64);
            let span = AlignedSpan::covering(at, take).expect("inside the file");
            self.read_span(span, staging.as_mut_slice())?;
            let take = take as usize;
            dst[done..done + take]
                .copy_from_slice(&staging.as_slice()[skip as usize..skip as usize + take]);
            done += take;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&bytes).unwrap();
        f.flush().unwrap();
        (f, bytes)
    }

    #[test]
    fn spans_cover_and_align() {
        for (offset, len) in [
            (0u64, 1u64),
            (4095, 2),
            (4096, 4096),
            (12345, 70000),
            (32, 0),
        ] {
            let s = AlignedSpan::covering(offset, len).unwrap();
            assert_eq!(s.start % IO_ALIGN, 0);
            assert_eq!(s.len % IO_ALIGN, 0);
            assert_eq!(s.start + s.skip, offset);
            assert!(s.start + s.len >= offset + len);
            assert!(s.len < len + 2 * IO_ALIGN);
        }
        assert_eq!(AlignedSpan::covering(u64::MAX - 10, 100), None);
    }

    /// Reads at unaligned offsets, across staging-buffer boundaries and up to the file's last
    /// (short) page return the file's bytes.
    #[test]
    fn reads_return_the_files_bytes() {
        let (f, bytes) = file_of(3 * 4096 * 5 + 777);
        let wf = WeightFile::open(f.path()).unwrap();
        assert_eq!(wf.len(), bytes.len() as u64);
        let mut staging = AlignedBuf::new(2 * 4096).unwrap();
        for (offset, len) in [
            (0usize, 10usize),
            (4000, 300),
            (5000, 20000),
            (61000, 1217),
            (0, 62217),
        ] {
            let mut dst = vec![0u8; len];
            wf.read_exact_at(offset as u64, &mut dst, &mut staging)
                .unwrap();
            assert_eq!(
                dst,
                bytes[offset..offset + len],
                "offset {offset} len {len}"
            );
        }
    }

    #[test]
    fn reads_past_the_end_are_refused() {
        let (f, bytes) = file_of(5000);
        let wf = WeightFile::open(f.path()).unwrap();
        let mut staging = AlignedBuf::new(4096).unwrap();
        let mut dst = vec![0u8; 100];
        let e = wf
            .read_exact_at(bytes.len() as u64 - 50, &mut dst, &mut staging)
            .unwrap_err();
        assert!(
            matches!(e, GdsError::Truncated { file_len: 5000, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("5000"), "{e}");
    }

    #[test]
    fn a_missing_file_names_itself() {
        let e = WeightFile::open(Path::new("/nonexistent/model.gguf"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for len in [1usize, 4096, 10000] {
            let b = AlignedBuf::new(len).unwrap();
            assert_eq!(b.as_slice().as_ptr() as usize % IO_ALIGN as usize, 0);
            assert!(b.len() >= len && b.len() % IO_ALIGN as usize == 0);
        }
    }
}
