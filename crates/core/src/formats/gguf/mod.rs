//! GGUF (v2 and v3): reader, writer and metadata accessors.
//!
//! Dimensions are stored innermost first (`dims[0]` is the row length); [`TensorInfo::shape`]
//! gives them outermost first. Tensor offsets are relative to the aligned data section.

mod reader;
mod value;
mod writer;

pub use reader::read;
pub use value::{type_id, Array, Value};
pub use writer::{GgufWriter, TensorFill};

use std::collections::HashMap;

use crate::formats::source::{ByteSource, SourceError};
use crate::formats::{ModelDescription, TensorDescription};
use crate::quant::GgmlType;

/// `general.alignment` when a file does not set it.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;

/// Errors of the GGUF reader and writer. Each names the field or tensor at fault.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("not a GGUF file (magic {found:02x?})")]
    BadMagic { found: [u8; 4] },
    #[error("GGUF version {version} is not supported (only 2 and 3)")]
    UnsupportedVersion { version: u32 },
    #[error("big-endian GGUF files are not supported")]
    BigEndian,
    #[error("truncated: {what} needs {needed} bytes at offset {offset}, the file has {len}")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        len: u64,
    },
    #[error("{what}: {value} is over the limit of {limit}")]
    TooLarge {
        what: String,
        value: u64,
        limit: u64,
    },
    #[error("{what}: not valid UTF-8")]
    InvalidUtf8 { what: String },
    #[error("metadata '{key}': unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("metadata '{key}': arrays nested deeper than {limit}")]
    NestingTooDeep { key: String, limit: u32 },
    #[error("metadata '{key}': bool byte {value} is neither 0 nor 1")]
    InvalidBool { key: String, value: u8 },
    #[error("metadata key '{key}' appears twice")]
    DuplicateKey { key: String },
    #[error("tensor '{name}' appears twice")]
    DuplicateTensor { name: String },
    #[error("general.alignment must be a non-zero power of two stored as u32, got {value}")]
    BadAlignment { value: String },
    #[error("tensor '{tensor}': {n_dims} dimensions (at most 4)")]
    TooManyDims { tensor: String, n_dims: u32 },
    #[error("tensor '{tensor}': bad shape {dims:?}: {reason}")]
    BadShape {
        tensor: String,
        dims: Vec<u64>,
        reason: String,
    },
    #[error("tensor '{tensor}': unknown GGML type id {id}")]
    UnknownDtype { tensor: String, id: u32 },
    #[error("tensor '{tensor}': {dtype} is not supported: {reason}")]
    UnsupportedDtype {
        tensor: String,
        dtype: GgmlType,
        reason: String,
    },
    #[error("tensor '{tensor}': offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor '{tensor}' ends at byte {end}, past the end of the file ({len} bytes)")]
    TensorOutOfBounds { tensor: String, end: u64, len: u64 },
    #[error("tensors '{a}' and '{b}' overlap")]
    Overlap { a: String, b: String },
    #[error("no tensor named '{name}'")]
    NoSuchTensor { name: String },
    #[error("metadata '{key}': {problem}")]
    Metadata { key: String, problem: String },
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("writing GGUF: {0}")]
    Io(#[from] std::io::Error),
}

/// One tensor's header entry.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions as stored: innermost (row length) first.
    pub dims: Vec<u64>,
    pub dtype: GgmlType,
    /// Offset relative to the start of the data section.
    pub offset: u64,
    /// Bytes the tensor occupies.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Dimensions outermost first (`[rows, cols]` for a matrix), as PyTorch writes them.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// The element count; `u64::MAX` for dimensions whose product overflows (the reader
    /// refuses those, but a header can also be built from an RDRR manifest or by hand).
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .unwrap_or(u64::MAX)
    }
}

/// A parsed GGUF header: metadata in file order, tensor infos, and where the data starts.
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Length of the file the header was read from.
    pub file_len: u64,
}

impl GgufFile {
    /// Parse a GGUF file's header from any byte source.
    pub fn read(src: &dyn ByteSource) -> Result<Self, GgufError> {
        read(src)
    }

    /// A header assembled from its parts rather than read from a file (the GGUF view of a
    /// model kept in another format, such as an RDRR folder converted from a GGUF). The data
    /// section is taken to start at 0 and `file_len` is the end of the last tensor. Refuses a
    /// metadata key or a tensor name that appears twice.
    pub fn from_parts(
        version: u32,
        metadata: Vec<(String, Value)>,
        tensors: Vec<TensorInfo>,
        alignment: u64,
    ) -> Result<Self, GgufError> {
        let mut index = HashMap::with_capacity(metadata.len());
        for (i, (key, _)) in metadata.iter().enumerate() {
            if index.insert(key.clone(), i).is_some() {
                return Err(GgufError::DuplicateKey { key: key.clone() });
            }
        }
        let mut names = std::collections::HashSet::with_capacity(tensors.len());
        for t in &tensors {
            if !names.insert(t.name.as_str()) {
                return Err(GgufError::DuplicateTensor {
                    name: t.name.clone(),
                });
            }
        }
        let file_len = tensors
            .iter()
            .map(|t| t.offset.saturating_add(t.n_bytes))
            .max()
            .unwrap_or(0);
        Ok(GgufFile {
            version,
            metadata,
            index,
            tensors,
            alignment,
            data_offset: 0,
            file_len,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    /// A required unsigned integer, with an error naming the key.
    pub fn require_u64(&self, key: &str) -> Result<u64, GgufError> {
        match self.get(key) {
            None => Err(GgufError::Metadata {
                key: key.into(),
                problem: "missing".into(),
            }),
            Some(v) => v.as_u64().ok_or_else(|| GgufError::Metadata {
                key: key.into(),
                problem: format!("expected a non-negative integer, got {v:?}"),
            }),
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Absolute byte range of a tensor's data.
    pub fn tensor_range(&self, t: &TensorInfo) -> (u64, u64) {
        (self.data_offset + t.offset, t.n_bytes)
    }

    /// Read one tensor's raw bytes.
    pub fn read_tensor(&self, src: &dyn ByteSource, name: &str) -> Result<Vec<u8>, GgufError> {
        let t = self
            .tensor(name)
            .ok_or_else(|| GgufError::NoSuchTensor { name: name.into() })?;
        let (start, len) = self.tensor_range(t);
        Ok(src.read_vec(start, len)?)
    }

    /// What `tritium inspect` shows.
    pub fn describe(&self) -> ModelDescription {
        let arch = self.architecture().map(str::to_string);
        let mut hyper = Vec::new();
        if let Some(a) = &arch {
            let prefix = format!("{a}.");
            for (k, v) in &self.metadata {
                if let Some(rest) = k.strip_prefix(&prefix) {
                    if v.as_array().is_none() {
                        hyper.push((rest.to_string(), v.to_json(0)));
                    }
                }
            }
        }
        if let Some(Value::Array(tokens)) = self.get("tokenizer.ggml.tokens") {
            hyper.push(("vocab_size (tokenizer)".into(), tokens.len().into()));
        }
        let tokenizer = self.get_str("tokenizer.ggml.model").map(|m| {
            match self.get_str("tokenizer.ggml.pre") {
                Some(pre) => format!("{m} (pre-tokenizer {pre})"),
                None => m.to_string(),
            }
        });
        let tensors = self
            .tensors
            .iter()
            .map(|t| TensorDescription {
                name: t.name.clone(),
                dtype: t.dtype.name().to_string(),
                shape: t.shape(),
                bytes: t.n_bytes,
                location: format!("offset {}", self.data_offset + t.offset),
            })
            .collect();
        ModelDescription {
            format: format!("GGUF v{}", self.version),
            architecture: arch,
            hyper_parameters: hyper,
            tokenizer,
            tensors,
        }
    }
}

#[cfg(test)]
mod tests;
