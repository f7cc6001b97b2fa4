//! Recognize what a path holds: a GGUF file, an RDRR folder or a Trellis folder.

use std::path::Path;

use crate::formats::gguf::GgufFile;
use crate::formats::rdrr::{self, Manifest};
use crate::formats::source::ByteSource;
use crate::formats::{trellis, ModelDescription};
use crate::storage::{DirFiles, FileSource};
use crate::Error;

/// A model opened from disk.
pub enum OpenModel {
    Gguf {
        src: FileSource,
        file: Box<GgufFile>,
    },
    Rdrr {
        files: DirFiles,
        manifest: Box<Manifest>,
    },
    Trellis {
        files: DirFiles,
    },
}

/// Open `path` as whichever format it is. A path that does not exist is looked up as the name
/// of a model in the store ([`crate::storage::resolve_model`]: `$TRITIUM_STORE` or the cache
/// folder). Errors name the path.
pub fn open(path: &Path) -> Result<OpenModel, Error> {
    let resolved;
    let path = match path.to_str() {
        Some(arg) if !path.exists() => {
            resolved = crate::storage::resolve_model(arg, None)?;
            resolved.as_path()
        }
        _ => path,
    };
    open_inner(path).map_err(|e| match e {
        // Already names the path.
        e @ (Error::Usage(_) | Error::Io { .. } | Error::Source(_)) => e,
        e => e.at(path),
    })
}

fn open_inner(path: &Path) -> Result<OpenModel, Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if meta.is_file() {
        let src = FileSource::open(path)?;
        let file = Box::new(GgufFile::read(&src)?);
        return Ok(OpenModel::Gguf { src, file });
    }
    let files = DirFiles::new(path);
    if path.join("manifest.json").is_file() {
        let manifest = Box::new(Manifest::load(&files)?);
        return Ok(OpenModel::Rdrr { files, manifest });
    }
    let trellis_markers = [
        "model.safetensors.index.json",
        "quantization_index.json",
        "quantization_config.json",
    ];
    if trellis_markers.iter().any(|m| path.join(m).is_file()) {
        return Ok(OpenModel::Trellis { files });
    }
    Err(Error::Usage(format!(
        "{}: not a GGUF file, an RDRR folder (manifest.json) or a Trellis folder \
         (model.safetensors.index.json or quantization_index.json)",
        path.display()
    )))
}

impl OpenModel {
    pub fn describe(&self) -> Result<ModelDescription, Error> {
        Ok(match self {
            OpenModel::Gguf { file, .. } => file.describe(),
            OpenModel::Rdrr { manifest, .. } => rdrr::describe(manifest),
            OpenModel::Trellis { files } => trellis::describe(files)?,
        })
    }

    /// One tensor dequantized to f32, in the file's element order.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, Error> {
        match self {
            OpenModel::Gguf { src, file } => {
                let t = file.tensor(name).ok_or_else(|| no_tensor(name, self))?;
                let raw = file.read_tensor(src as &dyn ByteSource, name)?;
                Ok(crate::quant::dequantize(
                    t.dtype,
                    &raw,
                    elements(t.n_elements())?,
                )?)
            }
            OpenModel::Rdrr { files, manifest } => {
                let t = manifest
                    .tensors
                    .get(name)
                    .ok_or_else(|| no_tensor(name, self))?;
                let dtype = t.ggml_type()?;
                let n = t.element_count().ok_or_else(|| {
                    Error::Usage(format!(
                        "tensor '{name}': its shape's element count overflows"
                    ))
                })?;
                let raw = rdrr::read_tensor(manifest, files, name)?;
                Ok(crate::quant::dequantize(dtype, &raw, elements(n)?)?)
            }
            OpenModel::Trellis { files } => Ok(trellis::dequantize_tensor(files, name)?),
        }
    }
}

fn elements(n: u64) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| Error::Usage(format!("{n} elements do not fit in memory here")))
}

fn no_tensor(name: &str, model: &OpenModel) -> Error {
    let hint = match model.describe() {
        Ok(d) => {
            let close: Vec<_> = d
                .tensors
                .iter()
                .filter(|t| t.name.contains(name) || name.contains(t.name.as_str()))
                .take(5)
                .map(|t| t.name.as_str())
                .collect();
            if close.is_empty() {
                String::new()
            } else {
                format!(" (similar: {})", close.join(", "))
            }
        }
        Err(_) => String::new(),
    };
    Error::Usage(format!("no tensor named '{name}'{hint}"))
}
