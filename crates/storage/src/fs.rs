//! Native files: a [`ByteSource`] over a file, and [`ModelFiles`] / [`ModelWriter`] over a
//! model folder.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::formats::source::{
    check_relative_path, ByteSource, FileWriter, ModelFiles, ModelWriter, SourceError,
};

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

    fn local_path(&self, path: &str) -> Option<PathBuf> {
        self.resolve(path).ok()
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

/// Writes into the folder through a temporary `<name>.part` file next to the target, which
/// only [`FileWriter::finish`] renames into place (after flushing and syncing it), so a crash
/// never leaves a complete-looking file under the real name.
impl ModelWriter for DirFiles {
    fn create_file(&mut self, path: &str) -> Result<Box<dyn FileWriter + '_>, SourceError> {
        check_relative_path(path)?;
        let target = self.root.join(path);
        let mut part_name = target.as_os_str().to_owned();
        part_name.push(".part");
        let part = PathBuf::from(part_name);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
        }
        let file = File::create(&part).map_err(|e| io_error(&part, e))?;
        Ok(Box::new(DirFileWriter {
            file: Some(BufWriter::new(file)),
            part,
            target,
        }))
    }
}

/// One file of a [`DirFiles`] being written to `part`; `file` is `None` once finished.
struct DirFileWriter {
    file: Option<BufWriter<File>>,
    part: PathBuf,
    target: PathBuf,
}

impl DirFileWriter {
    /// Flush and sync the part file, then rename it to the target.
    fn complete(&mut self, file: BufWriter<File>) -> std::io::Result<()> {
        let file = file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.part, &self.target)?;
        sync_parent(&self.target);
        Ok(())
    }
}

impl FileWriter for DirFileWriter {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SourceError> {
        match self.file.as_mut() {
            Some(f) => f.write_all(bytes).map_err(|e| io_error(&self.part, e)),
            None => Err(io_error(
                &self.target,
                std::io::Error::other("written to after it was finished"),
            )),
        }
    }

    fn finish(mut self: Box<Self>) -> Result<(), SourceError> {
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        self.complete(file).map_err(|e| {
            let _ = std::fs::remove_file(&self.part);
            io_error(&self.target, e)
        })
    }
}

impl Drop for DirFileWriter {
    /// An unfinished file is removed: its bytes never appear under any name.
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            // Close without flushing what is buffered: the file is being thrown away.
            let (file, _buffered) = file.into_parts();
            drop(file);
            let _ = std::fs::remove_file(&self.part);
        }
    }
}

/// Make a rename durable by syncing the folder that holds it. Best effort: some file systems
/// cannot sync a folder, and the file itself is already synced.
fn sync_parent(path: &Path) {
    #[cfg(unix)]
    if let Some(parent) = path.parent() {
        if let Ok(dir) = File::open(parent) {
            let _ = dir.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn files_appear_only_when_finished() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = DirFiles::new(tmp.path().join("out"));
        let mut w = dir
            .create_file("layer_0000/tensor_0000.safetensors")
            .unwrap();
        w.write_all(b"abc").unwrap();
        w.write_all(b"def").unwrap();
        let sub = tmp.path().join("out/layer_0000");
        assert_eq!(names(&sub), ["tensor_0000.safetensors.part"]);
        w.finish().unwrap();
        assert_eq!(names(&sub), ["tensor_0000.safetensors"]);
        assert_eq!(
            dir.read_small("layer_0000/tensor_0000.safetensors", 100)
                .unwrap(),
            b"abcdef"
        );

        // Replacing a file, and the whole-file convenience.
        dir.write_file("layer_0000/tensor_0000.safetensors", b"new")
            .unwrap();
        dir.write_file("config.json", b"{}").unwrap();
        assert_eq!(
            names(&tmp.path().join("out")),
            ["config.json", "layer_0000"]
        );
        assert_eq!(
            std::fs::read(sub.join("tensor_0000.safetensors")).unwrap(),
            b"new"
        );
    }

    #[test]
    fn a_dropped_writer_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = DirFiles::new(tmp.path());
        let mut w = dir.create_file("shard_00000.bin").unwrap();
        w.write_all(&[7; 100_000]).unwrap();
        drop(w);
        assert!(names(tmp.path()).is_empty());
        // An existing file stays as it was when its replacement is abandoned.
        dir.write_file("manifest.json", b"old").unwrap();
        let mut w = dir.create_file("manifest.json").unwrap();
        w.write_all(b"half").unwrap();
        drop(w);
        assert_eq!(names(tmp.path()), ["manifest.json"]);
        assert_eq!(
            std::fs::read(tmp.path().join("manifest.json")).unwrap(),
            b"old"
        );
    }

    #[test]
    fn unsafe_paths_create_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = DirFiles::new(tmp.path().join("model"));
        for bad in [
            "../escape.bin",
            "/tmp/x.bin",
            "",
            "a/../../b",
            "a\\b",
            "sub//x",
        ] {
            assert!(
                matches!(dir.create_file(bad), Err(SourceError::UnsafePath { .. })),
                "{bad:?}"
            );
            assert!(dir.write_file(bad, b"x").is_err(), "{bad:?}");
        }
        assert!(names(tmp.path()).is_empty());
    }
}
