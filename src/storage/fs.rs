//! Native files: a [`ByteSource`] over a file and [`ModelFiles`] over a model folder.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::formats::source::{check_relative_path, ByteSource, ModelFiles, SourceError};

fn io_error(path: &Path, e: std::io::Error) -> SourceError {
    if e.kind() == std::io::ErrorKind::NotFound {
        SourceError::NotFound {
            path: path.display().to_string(),
        }
    } else {
        SourceError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }
}

/// A file read with positioned reads (no shared cursor, so `&self` suffices).
pub struct FileSource {
    file: File,
    len: u64,
    name: String,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<Self, SourceError> {
        let file = File::open(path).map_err(|e| io_error(path, e))?;
        let meta = file.metadata().map_err(|e| io_error(path, e))?;
        if !meta.is_file() {
            return Err(SourceError::Io {
                path: path.display().to_string(),
                message: "not a regular file".into(),
            });
        }
        Ok(FileSource {
            file,
            len: meta.len(),
            name: path.display().to_string(),
        })
    }
}

impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        crate::formats::source::check_range(&self.name, offset, buf.len() as u64, self.len)?;
        read_exact_at(&self.file, buf, offset).map_err(|e| SourceError::Io {
            path: self.name.clone(),
            message: e.to_string(),
        })
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// A model folder on disk. Paths given to it are checked with [`check_relative_path`], so a
/// manifest can never make us read outside the folder.
pub struct DirFiles {
    root: PathBuf,
}

impl DirFiles {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirFiles { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, SourceError> {
        if path.is_empty() {
            return Ok(self.root.clone());
        }
        check_relative_path(path)?;
        Ok(self.root.join(path))
    }
}

impl ModelFiles for DirFiles {
    fn open<'a>(&'a self, path: &str) -> Result<Box<dyn ByteSource + 'a>, SourceError> {
        let full = self.resolve(path)?;
        Ok(Box::new(FileSource::open(&full)?))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, SourceError> {
        let full = self.resolve(dir)?;
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&full).map_err(|e| io_error(&full, e))? {
            let entry = entry.map_err(|e| io_error(&full, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &str) -> bool {
        self.resolve(path).map(|p| p.is_file()).unwrap_or(false)
    }
}
