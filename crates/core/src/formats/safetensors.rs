//! Safetensors: the header of a `.safetensors` file read through a [`ByteSource`], without
//! reading the tensor data, and a small writer for shards and test fixtures.
//!
//! Layout: an 8-byte little-endian header length `n`, `n` bytes of JSON (`name -> {dtype,
//! shape, data_offsets}` plus an optional `__metadata__` string map), then the data section.
//! Offsets are relative to the data section; tensors tile it with no gaps or overlaps and the
//! last one ends at the end of the file (the rules of the `safetensors` crate, whose `Dtype`,
//! `TensorInfo` and `Metadata` types we use).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use safetensors::tensor::{Metadata, TensorInfo};
pub use safetensors::Dtype;
use serde::Deserialize;

use super::source::{ByteSource, SourceError};

/// Largest header we accept (the `safetensors` crate's own limit is 100 MB).
pub const MAX_HEADER_LEN: u64 = 100 * 1024 * 1024;

/// Errors reading or writing a safetensors file. Each names the file (and tensor).
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("{file}: {len} bytes is too short for a safetensors file (it starts with an 8-byte header length)")]
    TooShort { file: String, len: u64 },
    #[error("{file}: header length {header_len} is more than the {max} bytes allowed")]
    HeaderTooLarge {
        file: String,
        header_len: u64,
        max: u64,
    },
    #[error("{file}: header length {header_len} runs past the end of the file ({file_len} bytes)")]
    HeaderPastEnd {
        file: String,
        header_len: u64,
        file_len: u64,
    },
    #[error("{file}: header is not valid safetensors JSON: {message}")]
    HeaderJson { file: String, message: String },
    #[error("{file}: tensor {tensor}: {reason}")]
    BadTensor {
        file: String,
        tensor: String,
        reason: String,
    },
    #[error("{file}: the tensors end at byte {data_end} of the data section, but it holds {data_len} bytes")]
    DataLength {
        file: String,
        data_end: u64,
        data_len: u64,
    },
    #[error("{file}: no tensor named {tensor}")]
    NoSuchTensor { file: String, tensor: String },
    #[error("cannot encode safetensors header: {message}")]
    Encode { message: String },
}

/// One tensor of a safetensors file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: Dtype,
    /// Dimensions, outermost first.
    pub shape: Vec<u64>,
    /// Absolute byte offset of the first byte in the file.
    pub start: u64,
    /// Absolute byte offset one past the last byte.
    pub end: u64,
}

impl TensorEntry {
    /// Number of bytes.
    pub fn byte_len(&self) -> u64 {
        self.end - self.start
    }

    /// Number of elements (the header check guarantees this does not overflow).
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// The parsed header of one safetensors file.
#[derive(Debug, Clone)]
pub struct SafetensorsHeader {
    /// The source's name, for error messages.
    pub file: String,
    /// Length of the JSON header in bytes (the data section starts at `8 + header_len`).
    pub header_len: u64,
    /// Tensors in file order.
    pub tensors: Vec<TensorEntry>,
    /// The `__metadata__` map (empty when absent).
    pub metadata: BTreeMap<String, String>,
    by_name: HashMap<String, usize>,
}

/// The header as JSON: the same shape the `safetensors` crate deserializes.
#[derive(Deserialize)]
struct RawHeader {
    #[serde(rename = "__metadata__")]
    metadata: Option<HashMap<String, String>>,
    #[serde(flatten)]
    tensors: HashMap<String, TensorInfo>,
}

impl SafetensorsHeader {
    /// Read and check the header. Only the first `8 + n` bytes are read; the header length is
    /// checked against [`MAX_HEADER_LEN`] and the source length before anything is allocated.
    pub fn read(source: &dyn ByteSource) -> Result<Self, SafetensorsError> {
        let file = source.name().to_string();
        let file_len = source.len();
        if file_len < 8 {
            return Err(SafetensorsError::TooShort {
                file,
                len: file_len,
            });
        }
        let mut len_bytes = [0u8; 8];
        source.read_at(0, &mut len_bytes)?;
        let header_len = u64::from_le_bytes(len_bytes);
        if header_len > MAX_HEADER_LEN {
            return Err(SafetensorsError::HeaderTooLarge {
                file,
                header_len,
                max: MAX_HEADER_LEN,
            });
        }
        let data_start = 8 + header_len;
        if data_start > file_len {
            return Err(SafetensorsError::HeaderPastEnd {
                file,
                header_len,
                file_len,
            });
        }
        let json = source.read_vec(8, header_len)?;
        let raw: RawHeader =
            serde_json::from_slice(&json).map_err(|e| SafetensorsError::HeaderJson {
                file: file.clone(),
                message: e.to_string(),
            })?;

        let mut infos: Vec<(String, TensorInfo)> = raw.tensors.into_iter().collect();
        infos.sort_by(|(an, a), (bn, b)| a.data_offsets.cmp(&b.data_offsets).then(an.cmp(bn)));
        let data_len = file_len - data_start;
        let mut tensors = Vec::with_capacity(infos.len());
        let mut expected_start = 0u64;
        for (name, info) in infos {
            let bad = |reason: String| SafetensorsError::BadTensor {
                file: file.clone(),
                tensor: name.clone(),
                reason,
            };
            let (s, e) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
            if e < s {
                return Err(bad(format!(
                    "data_offsets [{s}, {e}] end before they start"
                )));
            }
            if s != expected_start {
                return Err(bad(format!(
                    "data starts at byte {s} of the data section, expected {expected_start} \
                     (tensors must tile the data section without gaps or overlaps)"
                )));
            }
            if e > data_len {
                return Err(bad(format!(
                    "data_offsets [{s}, {e}] run past the end of the data section ({data_len} bytes)"
                )));
            }
            let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
            let bytes = tensor_bytes(info.dtype, &shape).ok_or_else(|| {
                bad(format!(
                    "shape {shape:?} of {} is too large or not a whole number of bytes",
                    info.dtype
                ))
            })?;
            if bytes != e - s {
                return Err(bad(format!(
                    "{} {shape:?} needs {bytes} bytes, but data_offsets [{s}, {e}] hold {}",
                    info.dtype,
                    e - s
                )));
            }
            expected_start = e;
            tensors.push(TensorEntry {
                name,
                dtype: info.dtype,
                shape,
                start: data_start + s,
                end: data_start + e,
            });
        }
        if expected_start != data_len {
            return Err(SafetensorsError::DataLength {
                file,
                data_end: expected_start,
                data_len,
            });
        }
        let by_name = tensors
            .iter()
            .enumerate()
            .map(|(k, t)| (t.name.clone(), k))
            .collect();
        Ok(Self {
            file,
            header_len,
            tensors,
            metadata: raw.metadata.unwrap_or_default().into_iter().collect(),
            by_name,
        })
    }

    /// Absolute offset of the data section.
    pub fn data_start(&self) -> u64 {
        8 + self.header_len
    }

    /// The tensor named `name`, if any.
    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.by_name.get(name).and_then(|&k| self.tensors.get(k))
    }

    /// Like [`SafetensorsHeader::tensor`], with an error naming the file.
    pub fn require(&self, name: &str) -> Result<&TensorEntry, SafetensorsError> {
        self.tensor(name)
            .ok_or_else(|| SafetensorsError::NoSuchTensor {
                file: self.file.clone(),
                tensor: name.to_string(),
            })
    }

    /// Tensor names in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    /// The raw bytes of tensor `name` (little-endian elements).
    pub fn read_tensor(
        &self,
        source: &dyn ByteSource,
        name: &str,
    ) -> Result<Vec<u8>, SafetensorsError> {
        let t = self.require(name)?;
        Ok(source.read_vec(t.start, t.byte_len())?)
    }
}

/// Bytes of a tensor of `dtype` and `shape`, or `None` on overflow or a partial byte.
pub fn tensor_bytes(dtype: Dtype, shape: &[u64]) -> Option<u64> {
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
    let bits = elements.checked_mul(dtype.bitsize() as u64)?;
    (bits % 8 == 0).then_some(bits / 8)
}

/// Read the header of `source`.
pub fn read_header(source: &dyn ByteSource) -> Result<SafetensorsHeader, SafetensorsError> {
    SafetensorsHeader::read(source)
}

/// Read the header of `source`, then the bytes of tensor `name`.
pub fn read_tensor(source: &dyn ByteSource, name: &str) -> Result<Vec<u8>, SafetensorsError> {
    SafetensorsHeader::read(source)?.read_tensor(source, name)
}

/// Widen little-endian F32, F16 or BF16 elements to f32; `None` for other dtypes.
pub fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    match dtype {
        Dtype::F32 => Some(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        Dtype::F16 => Some(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        Dtype::BF16 => Some(
            bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        _ => None,
    }
}

/// Little-endian bytes of f32 values (the data of an F32 tensor).
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A tensor to write: name, dtype, shape and its bytes.
#[derive(Debug, Clone)]
pub struct TensorBytes<'a> {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: Cow<'a, [u8]>,
}

/// Encode the start of a safetensors file (8-byte length + JSON header padded with spaces to
/// a multiple of 8) for tensors of the given names, dtypes, shapes and byte lengths, whose
/// data will follow in this order.
pub fn encode_header(
    tensors: &[(&str, Dtype, &[u64], u64)],
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<Vec<u8>, SafetensorsError> {
    let encode = |message: String| SafetensorsError::Encode { message };
    let mut seen = std::collections::HashSet::new();
    let mut infos = Vec::with_capacity(tensors.len());
    let mut offset = 0usize;
    for &(name, dtype, shape, len) in tensors {
        if !seen.insert(name) || name == "__metadata__" {
            return Err(encode(format!("tensor name {name:?} repeated or reserved")));
        }
        let len = usize::try_from(len).map_err(|_| encode(format!("{name}: too large")))?;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| encode(format!("{name}: offsets overflow")))?;
        let shape = shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| encode(format!("{name}: shape too large")))?;
        infos.push((
            name.to_string(),
            TensorInfo {
                dtype,
                shape,
                data_offsets: (offset, end),
            },
        ));
        offset = end;
    }
    let meta = metadata.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    let header = Metadata::new(meta, infos).map_err(|e| encode(e.to_string()))?;
    let mut json = serde_json::to_vec(&header).map_err(|e| encode(e.to_string()))?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// Serialize tensors (in the given order) into a whole safetensors file.
pub fn serialize(
    tensors: &[TensorBytes<'_>],
    metadata: Option<&BTreeMap<String, String>>,
) -> Result<Vec<u8>, SafetensorsError> {
    let specs: Vec<(&str, Dtype, &[u64], u64)> = tensors
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.dtype,
                t.shape.as_slice(),
                t.data.len() as u64,
            )
        })
        .collect();
    let mut out = encode_header(&specs, metadata)?;
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::source::NamedBytes;

    fn sample() -> Vec<u8> {
        let a = f32_bytes(&[1.0, 2.0, 3.0]);
        let b = vec![7u8; 4];
        serialize(
            &[
                TensorBytes {
                    name: "a".into(),
                    dtype: Dtype::F32,
                    shape: vec![3],
                    data: Cow::Owned(a),
                },
                TensorBytes {
                    name: "b".into(),
                    dtype: Dtype::U8,
                    shape: vec![2, 2],
                    data: Cow::Owned(b),
                },
            ],
            Some(&BTreeMap::from([("format".to_string(), "pt".to_string())])),
        )
        .unwrap()
    }

    #[test]
    fn round_trip_and_crate_agrees() {
        let bytes = sample();
        let h = read_header(&bytes).unwrap();
        assert_eq!(h.names().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(h.metadata["format"], "pt");
        assert_eq!(h.tensor("b").unwrap().shape, vec![2, 2]);
        assert_eq!(read_tensor(&bytes, "b").unwrap(), vec![7u8; 4]);
        let f = to_f32(Dtype::F32, &read_tensor(&bytes, "a").unwrap()).unwrap();
        assert_eq!(f, vec![1.0, 2.0, 3.0]);
        // The safetensors crate reads what we write.
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("a").unwrap().shape(), &[3]);
        assert!(matches!(
            read_tensor(&bytes, "c"),
            Err(SafetensorsError::NoSuchTensor { .. })
        ));
    }

    fn with_header(json: &str, data: usize) -> Vec<u8> {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.extend(std::iter::repeat_n(0u8, data));
        v
    }

    #[test]
    fn corrupt_headers_are_errors_naming_the_file() {
        let src = |b: &Vec<u8>| {
            let named = NamedBytes {
                name: "shard.safetensors".into(),
                bytes: b,
            };
            read_header(&named).map(|_| ()).unwrap_err().to_string()
        };
        assert!(src(&vec![1, 2, 3]).contains("too short"));
        assert!(src(&u64::MAX.to_le_bytes().to_vec()).contains("more than"));
        assert!(src(&1000u64.to_le_bytes().to_vec()).contains("past the end"));
        assert!(src(&with_header("{", 0)).contains("JSON"));
        let e = src(&with_header(
            r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
            4,
        ));
        assert!(
            e.contains("shard.safetensors") && e.contains("tensor w"),
            "{e}"
        );
        let e = src(&with_header(
            r#"{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
            2,
        ));
        assert!(e.contains("past the end"), "{e}");
        let e = src(&with_header(
            r#"{"w":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
            6,
        ));
        assert!(e.contains("gaps"), "{e}");
        let e = src(&with_header(
            r#"{"w":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}"#,
            4,
        ));
        assert!(e.contains("too large"), "{e}");
        let e = src(&with_header(
            r#"{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
            3,
        ));
        assert!(e.contains("holds 3 bytes"), "{e}");
    }
}
