//! Byte sources: the one way the pure format parsers see bytes.
//!
//! A parser never opens a file or a URL itself. It asks a [`ByteSource`] for a range, so the
//! same code reads from memory (tests, fuzzing), a native file, OPFS or an HTTP range request.
//! Model formats that span several files (RDRR, Trellis) see them through [`ModelFiles`], and
//! write them through [`ModelWriter`] (a [`FileWriter`] per file: create, write chunks, finish).

use std::collections::BTreeMap;

/// Errors raised while reading bytes from a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{what}: read of {len} bytes at offset {offset} is past the end ({source_len} bytes)")]
    OutOfRange {
        what: String,
        offset: u64,
        len: u64,
        source_len: u64,
    },
    #[error("{path}: not found")]
    NotFound { path: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{path}: not a plain relative path inside the model folder")]
    UnsafePath { path: String },
}

/// Random-access bytes of known length.
pub trait ByteSource {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// True when the source holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fill `buf` with the bytes at `offset..offset + buf.len()`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError>;

    /// A short name for error messages (a file name, a URL).
    fn name(&self) -> &str {
        "<bytes>"
    }

    /// Read `len` bytes at `offset` into a new vector. The range is checked against
    /// [`ByteSource::len`] before anything is allocated, so a corrupt length field can never
    /// make us allocate more than the source holds.
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        check_range(self.name(), offset, len, self.len())?;
        let mut buf = vec![0u8; len as usize];
        self.read_at(offset, &mut buf)?;
        Ok(buf)
    }
}

/// Check that `offset..offset+len` lies inside a source of `source_len` bytes.
pub fn check_range(what: &str, offset: u64, len: u64, source_len: u64) -> Result<(), SourceError> {
    match offset.checked_add(len) {
        Some(end) if end <= source_len && usize::try_from(len).is_ok() => Ok(()),
        _ => Err(SourceError::OutOfRange {
            what: what.to_string(),
            offset,
            len,
            source_len,
        }),
    }
}

impl ByteSource for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range("<bytes>", offset, buf.len() as u64, ByteSource::len(self))?;
        let start = offset as usize;
        buf.copy_from_slice(&self[start..start + buf.len()]);
        Ok(())
    }
}

impl ByteSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.as_slice().read_at(offset, buf)
    }
}

/// Named in-memory bytes: a [`ByteSource`] whose errors say which file they came from.
pub struct NamedBytes<'a> {
    pub name: String,
    pub bytes: &'a [u8],
}

impl ByteSource for NamedBytes<'_> {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        check_range(&self.name, offset, buf.len() as u64, self.len())?;
        let start = offset as usize;
        buf.copy_from_slice(&self.bytes[start..start + buf.len()]);
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// Reject anything but a plain relative path made of normal components: no absolute paths,
/// no `..`, no backslashes, no NUL, no empty components. Manifests name files with this.
pub fn check_relative_path(path: &str) -> Result<(), SourceError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path.contains(':')
        || path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        Err(SourceError::UnsafePath {
            path: path.to_string(),
        })
    } else {
        Ok(())
    }
}

/// The files of one model folder (an RDRR directory, a Trellis checkpoint).
/// Paths are relative and `/`-separated; implementations must refuse anything that
/// [`check_relative_path`] refuses.
pub trait ModelFiles {
    /// Open one file of the model folder.
    fn open<'a>(&'a self, path: &str) -> Result<Box<dyn ByteSource + 'a>, SourceError>;

    /// Names of the entries (files and folders) directly inside `dir` ("" is the model folder
    /// itself), sorted.
    fn list(&self, dir: &str) -> Result<Vec<String>, SourceError>;

    /// True when `path` names an existing file.
    fn exists(&self, path: &str) -> bool {
        self.open(path).is_ok()
    }

    /// Where `path` is on the local file system, for readers that open files themselves
    /// (direct and GPU-direct reads); `None` for folders that are not local files (the
    /// browser's OPFS, memory).
    fn local_path(&self, _path: &str) -> Option<std::path::PathBuf> {
        None
    }

    /// Read a whole (small) file, such as a JSON index, refusing files over `max_len` bytes.
    fn read_small(&self, path: &str, max_len: u64) -> Result<Vec<u8>, SourceError> {
        let src = self.open(path)?;
        if src.len() > max_len {
            return Err(SourceError::Io {
                path: path.to_string(),
                message: format!(
                    "{} bytes is more than the {max_len} allowed for this file",
                    src.len()
                ),
            });
        }
        src.read_vec(0, src.len())
    }
}

/// One file of a model folder being written: [`FileWriter::write_all`] any number of times,
/// then [`FileWriter::finish`]. Until `finish` returns `Ok` the file is not there under its name;
/// a writer dropped unfinished leaves nothing behind.
pub trait FileWriter {
    /// Append `bytes` to the file.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SourceError>;

    /// Complete the file and make it appear under its name (a folder on disk renames its
    /// temporary file into place here).
    fn finish(self: Box<Self>) -> Result<(), SourceError>;
}

/// A model folder that files can be written into: the writing counterpart of [`ModelFiles`].
/// Paths are relative and `/`-separated; implementations refuse anything that
/// [`check_relative_path`] refuses before creating anything, and create subfolders as needed.
pub trait ModelWriter {
    /// Start writing the file at `path`, replacing any file of that name once finished.
    fn create_file(&mut self, path: &str) -> Result<Box<dyn FileWriter + '_>, SourceError>;

    /// Write a whole file at once.
    fn write_file(&mut self, path: &str, bytes: &[u8]) -> Result<(), SourceError> {
        let mut file = self.create_file(path)?;
        file.write_all(bytes)?;
        file.finish()
    }
}

/// A model folder held in memory: for tests and fuzzing.
#[derive(Default, Clone, Debug)]
pub struct MemoryFiles {
    pub files: BTreeMap<String, Vec<u8>>,
}

impl MemoryFiles {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, path: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        self.files.insert(path.into(), bytes.into());
    }
}

impl ModelFiles for MemoryFiles {
    fn open<'a>(&'a self, path: &str) -> Result<Box<dyn ByteSource + 'a>, SourceError> {
        check_relative_path(path)?;
        match self.files.get(path) {
            Some(bytes) => Ok(Box::new(NamedBytes {
                name: path.to_string(),
                bytes,
            })),
            None => Err(SourceError::NotFound {
                path: path.to_string(),
            }),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        if !dir.is_empty() {
            check_relative_path(dir)?;
        }
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
            .collect();
        names.dedup();
        if names.is_empty() && !dir.is_empty() {
            return Err(SourceError::NotFound {
                path: dir.to_string(),
            });
        }
        Ok(names)
    }
}

/// A file of a [`MemoryFiles`] being written: its bytes join the folder on `finish`.
struct MemoryFileWriter<'a> {
    files: &'a mut MemoryFiles,
    path: String,
    bytes: Vec<u8>,
}

impl FileWriter for MemoryFileWriter<'_> {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SourceError> {
        self.bytes.extend_from_slice(bytes);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<(), SourceError> {
        let this = *self;
        this.files.insert(this.path, this.bytes);
        Ok(())
    }
}

impl ModelWriter for MemoryFiles {
    fn create_file(&mut self, path: &str) -> Result<Box<dyn FileWriter + '_>, SourceError> {
        check_relative_path(path)?;
        Ok(Box::new(MemoryFileWriter {
            files: self,
            path: path.to_string(),
            bytes: Vec::new(),
        }))
    }

    fn write_file(&mut self, path: &str, bytes: &[u8]) -> Result<(), SourceError> {
        check_relative_path(path)?;
        self.insert(path, bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_reads_fail_without_allocating() {
        let bytes = vec![1u8, 2, 3];
        assert!(bytes.read_vec(2, u64::MAX).is_err());
        assert!(bytes.read_vec(u64::MAX, 2).is_err());
        assert_eq!(bytes.read_vec(1, 2).unwrap(), vec![2, 3]);
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for p in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a\\b",
            "a\0b",
            "c:x",
            "a//b",
            "./a",
        ] {
            assert!(check_relative_path(p).is_err(), "{p:?} should be refused");
        }
        for p in ["shard_00000.bin", "layer_0001/index.json"] {
            assert!(check_relative_path(p).is_ok(), "{p:?} should be accepted");
        }
    }

    #[test]
    fn memory_files_list_folders() {
        let mut m = MemoryFiles::new();
        m.insert("a.json", b"{}".to_vec());
        m.insert("layer_0000/index.json", b"{}".to_vec());
        m.insert("layer_0000/tensor_0000.safetensors", vec![]);
        assert_eq!(m.list("").unwrap(), vec!["a.json", "layer_0000"]);
        assert_eq!(m.list("layer_0000").unwrap().len(), 2);
        assert!(m.open("../a.json").is_err());
    }

    #[test]
    fn memory_files_are_written_only_when_finished() {
        let mut m = MemoryFiles::new();
        let mut w = m.create_file("layer_0000/a.bin").unwrap();
        w.write_all(b"ab").unwrap();
        w.write_all(b"cd").unwrap();
        w.finish().unwrap();
        assert_eq!(m.files["layer_0000/a.bin"], b"abcd");
        let mut w = m.create_file("b.bin").unwrap();
        w.write_all(b"x").unwrap();
        drop(w);
        assert!(!m.exists("b.bin"));
        m.write_file("c.json", b"{}").unwrap();
        assert_eq!(m.files["c.json"], b"{}");
        for bad in ["../x", "/x", "", "a//b"] {
            assert!(m.create_file(bad).is_err(), "{bad:?}");
            assert!(m.write_file(bad, b"").is_err(), "{bad:?}");
        }
        assert_eq!(m.files.len(), 2);
    }
}
