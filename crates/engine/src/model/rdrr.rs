//! Running a model kept as an RDRR folder: what `open_model` builds from a GGUF (the header the
//! configuration is read from, the tokenizer, the chat template, and a [`TensorSource`]), built
//! from the folder's `manifest.json`, `tensors.json`, `gguf_metadata.json` or `config.json`,
//! `tokenizer.json` and shards. Pure: every byte comes through [`ModelFiles`], so the same code
//! serves a folder on disk, a model store, or OPFS.
//!
//! The header is the GGUF view of the folder ([`rdrr::view`]): for a folder converted from a
//! GGUF, the original GGUF's key/values, types and order, with tensor infos from
//! `tensors.json`; for a folder with Hugging Face tensor names (as the seed's converter writes
//! it), the metadata llama.cpp's converter writes for that checkpoint, its tensors renamed to
//! GGUF names (and Llama's q/k rows permuted as they are read, [`ViewSources::finish`]). So
//! [`ModelConfig::from_gguf`](super::ModelConfig::from_gguf), [`Tokenizer::from_gguf`] and
//! [`ChatTemplate::from_gguf`] read it exactly as they read the original file, which is what
//! makes a GGUF and its RDRR conversion give the same tokens.

use super::weights::TensorSource;
use crate::error::ModelError;
use crate::formats::gguf::{GgufFile, Value};
use crate::formats::rdrr::{self, Manifest, RdrrError, ViewSources, TOKENIZER_FILE};
use crate::formats::source::ModelFiles;
use crate::quant::GgmlType;
use crate::text::{ChatTemplate, TextError, Tokenizer};
use crate::Error;

/// An RDRR model opened for running: manifest, GGUF view and files.
pub struct RdrrModel<F: ModelFiles> {
    pub manifest: Manifest,
    /// The GGUF view of the model's metadata and tensors.
    pub header: GgufFile,
    /// Where the view's tensors are in the folder.
    pub sources: ViewSources,
    pub files: F,
}

impl<F: ModelFiles> RdrrModel<F> {
    /// Read the manifest (checked: every shard a plain file name, every tensor's dtype known)
    /// and the GGUF metadata.
    pub fn open(files: F) -> Result<Self, Error> {
        let manifest = Manifest::load(&files)?;
        Self::with_manifest(files, manifest)
    }

    /// As [`RdrrModel::open`], with a manifest already read from `files`.
    pub fn with_manifest(files: F, manifest: Manifest) -> Result<Self, Error> {
        let view = rdrr::view(&manifest, &files)?;
        Ok(RdrrModel {
            manifest,
            header: view.header,
            sources: view.sources,
            files,
        })
    }

    /// The tokenizer: from the GGUF metadata when it holds a vocabulary (as it does for a
    /// model converted from a GGUF), else from the folder's `tokenizer.json` (a model converted
    /// from a Hugging Face checkpoint).
    pub fn tokenizer(&self) -> Result<Tokenizer, Error> {
        tokenizer(&self.manifest, &self.header, &self.files)
    }

    /// The chat template: as [`ChatTemplate::from_gguf`] reads it when the metadata holds the
    /// vocabulary; else `tokenizer.chat_template` with the BOS/EOS texts of `tokenizer`, or
    /// the fallback for the architecture.
    pub fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, TextError> {
        chat_template(&self.header, tokenizer)
    }
}

/// [`RdrrModel::tokenizer`] from its parts.
pub fn tokenizer<F: ModelFiles>(
    manifest: &Manifest,
    header: &GgufFile,
    files: &F,
) -> Result<Tokenizer, Error> {
    if header.get("tokenizer.ggml.tokens").is_some() {
        return Ok(Tokenizer::from_gguf(header)?);
    }
    let name = manifest
        .tokenizer
        .as_ref()
        .and_then(|t| t.file.as_deref())
        .unwrap_or(TOKENIZER_FILE);
    tokenizer_json(files, name)
}

/// The tokenizer of a model folder's `tokenizer.json` (`name`), or an error naming the
/// missing file.
pub fn tokenizer_json<F: ModelFiles>(files: &F, name: &str) -> Result<Tokenizer, Error> {
    if !files.exists(name) {
        return Err(ModelError::NoTokenizer {
            file: name.to_string(),
        }
        .into());
    }
    let bytes = files.read_small(name, rdrr::MAX_JSON_BYTES)?;
    Ok(Tokenizer::from_json(&bytes)?)
}

/// [`RdrrModel::chat_template`] from the GGUF view.
pub fn chat_template(
    header: &GgufFile,
    tokenizer: Option<&Tokenizer>,
) -> Result<ChatTemplate, TextError> {
    if header.get("tokenizer.ggml.tokens").is_some() {
        return ChatTemplate::from_gguf(header);
    }
    chat_template_for(header, tokenizer)
}

/// The chat template of a model whose vocabulary is in a `tokenizer.json`: the metadata's
/// `tokenizer.chat_template`, given the texts of the BOS/EOS ids the metadata names (or the
/// tokenizer's own); without a template, BitNet's for BitNet architectures, else ChatML.
pub fn chat_template_for(
    header: &GgufFile,
    tokenizer: Option<&Tokenizer>,
) -> Result<ChatTemplate, TextError> {
    let text = |key: &str, fallback: Option<u32>| -> String {
        let id = header
            .get_u64(key)
            .and_then(|v| u32::try_from(v).ok())
            .or(fallback);
        match (tokenizer, id) {
            (Some(t), Some(id)) => t.id_to_token(id).unwrap_or_default(),
            _ => String::new(),
        }
    };
    let bos = text(
        "tokenizer.ggml.bos_token_id",
        tokenizer.and_then(|t| t.bos()),
    );
    let eos = text(
        "tokenizer.ggml.eos_token_id",
        tokenizer.and_then(|t| t.eos()),
    );
    if let Some(Value::String(source)) = header.get("tokenizer.chat_template") {
        return ChatTemplate::new(source, &bos, &eos);
    }
    match header.architecture() {
        Some("bitnet-b1.58" | "bitnet-25" | "bitnet") => Ok(ChatTemplate::bitnet(&bos, &eos)),
        _ => Ok(ChatTemplate::chatml()),
    }
}

impl<F: ModelFiles> TensorSource for RdrrModel<F> {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        self.header.tensor(name).map(|t| (t.dtype, t.dims.clone()))
    }

    /// The tensor's bytes, joined across shards when it spans several.
    fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        read(
            &self.manifest,
            &self.header,
            &self.sources,
            &self.files,
            name,
        )
    }
}

/// The bytes of the view's tensor `name` from an RDRR folder: its manifest tensor's bytes,
/// joined across shards when it spans several, as the view takes them
/// ([`ViewSources::finish`]).
pub fn read<F: ModelFiles>(
    manifest: &Manifest,
    header: &GgufFile,
    sources: &ViewSources,
    files: &F,
    name: &str,
) -> Result<Vec<u8>, Error> {
    let missing = || -> Error {
        ModelError::MissingTensor {
            name: name.to_string(),
        }
        .into()
    };
    let info = header.tensor(name).ok_or_else(missing)?;
    let bytes =
        rdrr::read_tensor(manifest, files, sources.manifest_name(name)).map_err(|e| match e {
            RdrrError::NoSuchTensor(_) => missing(),
            e => e.into(),
        })?;
    Ok(sources.finish(info, bytes)?)
}
