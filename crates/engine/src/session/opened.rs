//! A model's files opened as the model they hold, its format detected once: a GGUF file, an
//! RDRR folder (`manifest.json`) or a Trellis folder. The same code serves a folder on disk
//! ([`crate::storage::DirFiles`]), the browser's OPFS and memory: every byte comes through
//! [`ModelFiles`].

use std::sync::OnceLock;

use crate::error::ModelError;
use crate::formats::gguf::GgufFile;
use crate::formats::rdrr::{self, Manifest, RdrrView, TOKENIZER_FILE};
use crate::formats::source::ModelFiles;
use crate::formats::trellis::{self, TrellisView};
use crate::formats::ModelDescription;
use crate::model::{FileSpan, GgufTensors, TensorSource};
use crate::quant::GgmlType;
use crate::text::{ChatTemplate, Tokenizer};
use crate::Error;

/// The files that mark a Trellis checkpoint folder.
const TRELLIS_MARKERS: [&str; 3] = [
    "model.safetensors.index.json",
    "quantization_index.json",
    "quantization_config.json",
];

/// Which format a model is in.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Gguf,
    Rdrr,
    Trellis,
}

/// A model opened from its files.
pub enum OpenedModel<F: ModelFiles> {
    /// The GGUF file `file` of `files`, and its header.
    Gguf {
        files: F,
        file: String,
        header: Box<GgufFile>,
    },
    /// An RDRR folder: its manifest, and the GGUF view of its metadata and tensors, read
    /// (after [`rdrr::check_layout`]) when the model is first run; checking a folder needs
    /// only the manifest.
    Rdrr {
        files: F,
        manifest: Box<Manifest>,
        view: OnceLock<RdrrView>,
    },
    /// A Trellis folder, and its GGUF view (read when the model is first run).
    Trellis(F, OnceLock<TrellisView>),
}

/// What running a model needs besides its tensors: the configuration's metadata, the
/// tokenizer and the chat template.
pub trait ModelMeta {
    /// The GGUF header (an RDRR folder's GGUF view): what the configuration is read from.
    fn header(&self) -> Result<&GgufFile, Error>;
    /// The tokenizer, or why there is none.
    fn tokenizer(&self) -> Result<Tokenizer, Error>;
    /// The chat template (or the architecture's fallback).
    fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, Error>;
    /// The model's own runtime hints (an RDRR manifest's `runtimeOptimizations`), if any.
    fn runtime_hints(&self) -> Option<&rdrr::RuntimeOptimizations> {
        None
    }
}

impl<F: ModelFiles> OpenedModel<F> {
    /// The GGUF file `file` of `files`.
    pub fn gguf(files: F, file: &str) -> Result<Self, Error> {
        let header = GgufFile::read(&*files.open(file)?)?;
        Ok(OpenedModel::Gguf {
            files,
            file: file.to_string(),
            header: Box::new(header),
        })
    }

    /// A model folder: RDRR when it has a `manifest.json`, Trellis when it has a Trellis index.
    pub fn folder(files: F) -> Result<Self, Error> {
        if files.exists(rdrr::MANIFEST_FILE) {
            let manifest = Box::new(Manifest::load(&files)?);
            return Ok(OpenedModel::Rdrr {
                files,
                manifest,
                view: OnceLock::new(),
            });
        }
        if TRELLIS_MARKERS.iter().any(|m| files.exists(m)) {
            return Ok(OpenedModel::Trellis(files, OnceLock::new()));
        }
        Err(ModelError::UnknownFormat.into())
    }

    pub fn format(&self) -> Format {
        match self {
            OpenedModel::Gguf { .. } => Format::Gguf,
            OpenedModel::Rdrr { .. } => Format::Rdrr,
            OpenedModel::Trellis(..) => Format::Trellis,
        }
    }

    /// The model's files.
    pub fn files(&self) -> &F {
        match self {
            OpenedModel::Gguf { files, .. }
            | OpenedModel::Rdrr { files, .. }
            | OpenedModel::Trellis(files, _) => files,
        }
    }

    /// Architecture, hyper-parameters and tensor table.
    pub fn describe(&self) -> Result<ModelDescription, Error> {
        Ok(match self {
            OpenedModel::Gguf { header, .. } => header.describe(),
            OpenedModel::Rdrr { manifest, .. } => rdrr::describe(manifest),
            OpenedModel::Trellis(files, _) => trellis::describe(files)?,
        })
    }

    /// One tensor dequantized to f32, in the file's element order.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, Error> {
        match self {
            OpenedModel::Gguf {
                files,
                file,
                header,
            } => {
                let t = header.tensor(name).ok_or_else(|| self.no_tensor(name))?;
                let raw = header.read_tensor(&*files.open(file)?, name)?;
                Ok(crate::quant::dequantize(
                    t.dtype,
                    &raw,
                    elements(t.n_elements())?,
                )?)
            }
            OpenedModel::Rdrr {
                files, manifest, ..
            } => {
                let t = manifest
                    .tensors
                    .get(name)
                    .ok_or_else(|| self.no_tensor(name))?;
                // Nothing is allocated from a manifest whose tensors claim bytes the files do
                // not hold.
                rdrr::check_layout(manifest, files)?;
                let dtype = t.ggml_type()?;
                let n = t.element_count().ok_or_else(|| ModelError::ShapeOverflow {
                    name: name.to_string(),
                })?;
                let raw = rdrr::read_tensor(manifest, files, name)?;
                Ok(crate::quant::dequantize(dtype, &raw, elements(n)?)?)
            }
            OpenedModel::Trellis(files, _) => Ok(trellis::dequantize_tensor(files, name)?),
        }
    }

    /// An error for a tensor the model lacks, naming similar ones.
    fn no_tensor(&self, name: &str) -> Error {
        // The names alone (a GGUF's or an RDRR manifest's, not a whole description).
        let names: Vec<String> = match self {
            OpenedModel::Gguf { header, .. } => {
                header.tensors.iter().map(|t| t.name.clone()).collect()
            }
            OpenedModel::Rdrr { manifest, .. } => manifest.tensors.keys().cloned().collect(),
            // Its tensors are named in shards' headers; `describe` lists them.
            OpenedModel::Trellis(..) => Vec::new(),
        };
        let similar = names
            .into_iter()
            .filter(|t| t.contains(name) || name.contains(t.as_str()))
            .take(5)
            .collect();
        ModelError::NoSuchTensor {
            name: name.to_string(),
            similar,
        }
        .into()
    }
}

impl<F: ModelFiles> OpenedModel<F> {
    /// An RDRR folder's GGUF view, read once. Before the tensor infos reach the engine, which
    /// sizes buffers from them, a model whose manifest contradicts itself or its files is
    /// refused here.
    fn view<'a>(
        &self,
        files: &F,
        manifest: &Manifest,
        view: &'a OnceLock<RdrrView>,
    ) -> Result<&'a RdrrView, Error> {
        if let Some(v) = view.get() {
            return Ok(v);
        }
        rdrr::check_layout(manifest, files)?;
        let v = rdrr::view(manifest, files)?;
        Ok(view.get_or_init(|| v))
    }
}

/// A Trellis folder's GGUF view, read once.
fn trellis_view<'a, F: ModelFiles>(
    files: &F,
    view: &'a OnceLock<TrellisView>,
) -> Result<&'a TrellisView, Error> {
    if let Some(v) = view.get() {
        return Ok(v);
    }
    let v = TrellisView::open(files)?;
    Ok(view.get_or_init(|| v))
}

fn elements(n: u64) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| {
        ModelError::TooLarge {
            what: "a tensor".into(),
            elements: n,
        }
        .into()
    })
}

impl<F: ModelFiles> ModelMeta for OpenedModel<F> {
    fn header(&self) -> Result<&GgufFile, Error> {
        if self.is_adapter() {
            return Err(ModelError::IsAdapter.into());
        }
        match self {
            OpenedModel::Gguf { header, .. } => Ok(header),
            OpenedModel::Rdrr {
                files,
                manifest,
                view,
            } => Ok(&self.view(files, manifest, view)?.header),
            OpenedModel::Trellis(files, view) => Ok(&trellis_view(files, view)?.header),
        }
    }

    fn tokenizer(&self) -> Result<Tokenizer, Error> {
        let header = self.header()?;
        match self {
            OpenedModel::Rdrr {
                files, manifest, ..
            } => crate::model::rdrr::tokenizer(manifest, header, files),
            OpenedModel::Trellis(files, _) => {
                crate::model::rdrr::tokenizer_json(files, TOKENIZER_FILE)
            }
            _ => Ok(Tokenizer::from_gguf(header)?),
        }
    }

    fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, Error> {
        let header = self.header()?;
        Ok(match self {
            OpenedModel::Rdrr { .. } => crate::model::rdrr::chat_template(header, tokenizer)?,
            OpenedModel::Trellis(..) => crate::model::rdrr::chat_template_for(header, tokenizer)?,
            _ => ChatTemplate::from_gguf(header)?,
        })
    }

    fn runtime_hints(&self) -> Option<&rdrr::RuntimeOptimizations> {
        match self {
            OpenedModel::Rdrr { manifest, .. } => manifest.runtime_optimizations.as_ref(),
            _ => None,
        }
    }
}

impl<F: ModelFiles> TensorSource for OpenedModel<F> {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        let header = self.header().ok()?;
        header.tensor(name).map(|t| (t.dtype, t.dims.clone()))
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        match self {
            OpenedModel::Gguf {
                files,
                file,
                header,
            } => {
                let src = files.open(file)?;
                GgufTensors {
                    file: header,
                    src: &*src,
                }
                .read(name)
            }
            OpenedModel::Rdrr {
                files,
                manifest,
                view,
            } => {
                let view = self.view(files, manifest, view)?;
                crate::model::rdrr::read(manifest, &view.header, &view.sources, files, name)
            }
            OpenedModel::Trellis(files, view) => Ok(trellis_view(files, view)?.read(files, name)?),
        }
    }

    fn location(&self, name: &str) -> Option<Vec<FileSpan>> {
        match self {
            OpenedModel::Gguf {
                files,
                file,
                header,
            } => {
                let (offset, len) = header.tensor_range(header.tensor(name)?);
                Some(vec![FileSpan {
                    path: files.local_path(file)?,
                    offset,
                    len,
                }])
            }
            OpenedModel::Rdrr {
                files,
                manifest,
                view,
            } => {
                // Only where the view's bytes are the folder's as they are.
                let sources = &self.view(files, manifest, view).ok()?.sources;
                if !sources.verbatim(name) {
                    return None;
                }
                manifest
                    .tensors
                    .get(sources.manifest_name(name))?
                    .spans
                    .iter()
                    .map(|span| {
                        Some(FileSpan {
                            path: files.local_path(manifest.shard_file(span.shard).ok()?)?,
                            offset: span.offset,
                            len: span.size,
                        })
                    })
                    .collect()
            }
            OpenedModel::Trellis(..) => None,
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::formats::rdrr::ConvertOptions;
    use crate::storage::DirFiles;

    const FIXTURE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/bitnet");

    /// The bytes a location names, read with plain file reads.
    fn read_location(spans: &[FileSpan]) -> Vec<u8> {
        let mut out = Vec::new();
        for s in spans {
            let f = std::fs::File::open(&s.path).unwrap();
            let mut b = vec![0u8; s.len as usize];
            f.read_exact_at(&mut b, s.offset).unwrap();
            out.extend(b);
        }
        out
    }

    /// Every tensor's location in a GGUF file and in an RDRR folder of small shards (tensors
    /// across shards) holds exactly the bytes `read` gives.
    #[test]
    fn locations_hold_the_tensors_bytes() {
        let gguf = OpenedModel::gguf(DirFiles::new(FIXTURE_DIR), "tiny-i2s.gguf").unwrap();
        let names: Vec<String> = gguf
            .header()
            .unwrap()
            .tensors
            .iter()
            .map(|t| t.name.clone())
            .collect();
        assert!(names.len() > 5);
        for n in &names {
            let spans = gguf.location(n).unwrap();
            assert_eq!(spans.len(), 1);
            assert_eq!(read_location(&spans), gguf.read(n).unwrap(), "{n}");
        }
        assert_eq!(gguf.location("no.such.tensor"), None);

        let dir = tempfile::tempdir().unwrap();
        let mut files = DirFiles::new(dir.path());
        let src = crate::storage::FileSource::open(
            &std::path::Path::new(FIXTURE_DIR).join("tiny-i2s.gguf"),
        )
        .unwrap();
        let mut opts = ConvertOptions::new("tiny");
        opts.shard_size = 64 << 10;
        let OpenedModel::Gguf { header, .. } = &gguf else {
            unreachable!()
        };
        rdrr::convert_gguf(&src, header, &mut files, &opts, &[]).unwrap();
        let rdrr = OpenedModel::folder(DirFiles::new(dir.path())).unwrap();
        let mut spanning = 0;
        for n in &names {
            let spans = rdrr.location(n).unwrap();
            spanning += usize::from(spans.len() > 1);
            assert_eq!(read_location(&spans), gguf.read(n).unwrap(), "{n}");
        }
        assert!(spanning > 0, "no tensor spans two shards at 64 KiB shards");
    }
}
