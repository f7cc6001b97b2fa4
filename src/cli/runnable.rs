//! A model opened to run (`run`, `chat`, `logits`, `bench generate`): a GGUF file or an RDRR
//! folder, seen the same way: a GGUF header for the configuration, the tokenizer, the chat
//! template, and a [`TensorSource`] for the weights.

use std::path::Path;

use super::model::{open, OpenModel};
use crate::formats::gguf::GgufFile;
use crate::model::{GgufTensors, RdrrModel, TensorSource};
use crate::quant::GgmlType;
use crate::storage::{DirFiles, FileSource};
use crate::text::{ChatTemplate, TextError, Tokenizer};
use crate::Error;

/// A GGUF file or an RDRR folder, opened to run.
pub enum RunnableModel {
    Gguf {
        src: FileSource,
        file: Box<GgufFile>,
    },
    Rdrr(Box<RdrrModel<DirFiles>>),
}

impl RunnableModel {
    /// Open a GGUF file or an RDRR folder; a Trellis folder is refused with a clear error.
    pub fn open(path: &Path) -> Result<RunnableModel, Error> {
        match open(path)? {
            OpenModel::Gguf { src, file } => Ok(RunnableModel::Gguf { src, file }),
            OpenModel::Rdrr { files, manifest } => Ok(RunnableModel::Rdrr(Box::new(
                RdrrModel::with_manifest(files, *manifest).map_err(|e| e.at(path))?,
            ))),
            OpenModel::Trellis { .. } => Err(Error::Usage(format!(
                "{}: running Trellis models is not supported; give a GGUF file or an RDRR folder",
                path.display()
            ))),
        }
    }

    /// The GGUF header (an RDRR folder's GGUF view): what the configuration is read from.
    pub fn header(&self) -> &GgufFile {
        match self {
            RunnableModel::Gguf { file, .. } => file,
            RunnableModel::Rdrr(m) => &m.header,
        }
    }

    /// The tokenizer, or why there is none.
    pub fn tokenizer(&self) -> Result<Tokenizer, Error> {
        match self {
            RunnableModel::Gguf { file, .. } => Ok(Tokenizer::from_gguf(file)?),
            RunnableModel::Rdrr(m) => m.tokenizer(),
        }
    }

    /// The chat template (or the architecture's fallback).
    pub fn chat_template(&self, tokenizer: Option<&Tokenizer>) -> Result<ChatTemplate, TextError> {
        match self {
            RunnableModel::Gguf { file, .. } => ChatTemplate::from_gguf(file),
            RunnableModel::Rdrr(m) => m.chat_template(tokenizer),
        }
    }
}

impl TensorSource for RunnableModel {
    fn meta(&self, name: &str) -> Option<(GgmlType, Vec<u64>)> {
        match self {
            RunnableModel::Gguf { src, file } => GgufTensors { file, src }.meta(name),
            RunnableModel::Rdrr(m) => m.meta(name),
        }
    }

    fn read(&self, name: &str) -> Result<Vec<u8>, Error> {
        match self {
            RunnableModel::Gguf { src, file } => GgufTensors { file, src }.read(name),
            RunnableModel::Rdrr(m) => m.read(name),
        }
    }
}
