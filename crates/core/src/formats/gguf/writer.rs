//! GGUF writer (v3 by default, v2 on request): metadata, tensor infos with aligned offsets,
//! then the data section. Used by the converter and by tests that build files.

use std::io::Write;

use super::value::{Array, Value};
use super::{GgufError, DEFAULT_ALIGNMENT, MAX_DIMS};
use crate::quant::GgmlType;

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    dtype: GgmlType,
    data: TensorData,
}

/// A tensor's bytes: held, or supplied while writing ([`GgufWriter::write_streaming`]).
enum TensorData {
    Bytes(Vec<u8>),
    Deferred(u64),
}

impl TensorData {
    fn len(&self) -> u64 {
        match self {
            TensorData::Bytes(b) => b.len() as u64,
            TensorData::Deferred(n) => *n,
        }
    }
}

/// Supplies a deferred tensor's bytes: `(index, name, out)`.
pub type TensorFill<'a> = dyn FnMut(usize, &str, &mut dyn Write) -> Result<(), GgufError> + 'a;

/// Builds a GGUF file in memory order: add metadata and tensors, then [`GgufWriter::write`].
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Write GGUF version 2 (64-bit counts, as v3) instead of 3.
    pub fn version(mut self, version: u32) -> Result<Self, GgufError> {
        if version != 2 && version != 3 {
            return Err(GgufError::UnsupportedVersion { version });
        }
        self.version = version;
        Ok(self)
    }

    /// Set `general.alignment` (a power of two).
    pub fn alignment(mut self, alignment: u32) -> Result<Self, GgufError> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::BadAlignment {
                value: alignment.to_string(),
            });
        }
        self.alignment = u64::from(alignment);
        self.metadata.retain(|(k, _)| k != "general.alignment");
        self.metadata
            .push(("general.alignment".into(), Value::U32(alignment)));
        Ok(self)
    }

    /// Add a metadata key. Keys must be unique.
    pub fn add(&mut self, key: impl Into<String>, value: Value) -> Result<(), GgufError> {
        let key = key.into();
        if self.metadata.iter().any(|(k, _)| *k == key) {
            return Err(GgufError::DuplicateKey { key });
        }
        self.metadata.push((key, value));
        Ok(())
    }

    /// Set the data alignment without adding a `general.alignment` key (for a file whose
    /// metadata, copied in its own order, already holds that key). A power of two.
    pub fn data_alignment(mut self, alignment: u64) -> Result<Self, GgufError> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::BadAlignment {
                value: alignment.to_string(),
            });
        }
        self.alignment = alignment;
        Ok(self)
    }

    /// Add a tensor. `shape` is outermost first (`[rows, cols]`); `data` must be exactly the
    /// bytes `dtype` needs for that many elements.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: GgmlType,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<(), GgufError> {
        self.push_tensor(name.into(), dtype, shape, TensorData::Bytes(data))
    }

    /// Declare a tensor whose `n_bytes` bytes are supplied later, by the callback of
    /// [`GgufWriter::write_streaming`], so a model never has to be held in memory whole.
    pub fn add_tensor_info(
        &mut self,
        name: impl Into<String>,
        dtype: GgmlType,
        shape: &[u64],
        n_bytes: u64,
    ) -> Result<(), GgufError> {
        self.push_tensor(name.into(), dtype, shape, TensorData::Deferred(n_bytes))
    }

    fn push_tensor(
        &mut self,
        name: String,
        dtype: GgmlType,
        shape: &[u64],
        data: TensorData,
    ) -> Result<(), GgufError> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor { name });
        }
        if shape.len() > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                tensor: name,
                n_dims: shape.len() as u32,
            });
        }
        let dims: Vec<u64> = shape.iter().rev().copied().collect();
        let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let expected = n.and_then(|n| dtype.tensor_bytes(n));
        if expected != Some(data.len()) {
            return Err(GgufError::BadShape {
                tensor: name,
                dims,
                reason: format!(
                    "{} bytes of {dtype} data do not match the shape",
                    data.len()
                ),
            });
        }
        self.tensors.push(PendingTensor {
            name,
            dims,
            dtype,
            data,
        });
        Ok(())
    }

    /// Serialize the whole file (every tensor must have been given its bytes). The last tensor
    /// is not padded.
    pub fn write(&self, out: &mut dyn Write) -> Result<(), GgufError> {
        let offsets = self.write_header(out)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let TensorData::Bytes(data) = &t.data else {
                return Err(GgufError::Metadata {
                    key: t.name.clone(),
                    problem: "tensor declared without its bytes: use write_streaming".into(),
                });
            };
            out.write_all(data)?;
            if i + 1 < self.tensors.len() {
                let gap = offsets[i + 1] - offsets[i] - data.len() as u64;
                out.write_all(&vec![0u8; gap as usize])?;
            }
        }
        Ok(())
    }

    /// Serialize the file, asking `fill(index, name, out)` for the bytes of each tensor
    /// declared with [`GgufWriter::add_tensor_info`], in order; it must write exactly the
    /// declared number of bytes. Every tensor, the last one included, is padded to the
    /// alignment, as gguf-py and llama.cpp write files.
    pub fn write_streaming(
        &self,
        out: &mut dyn Write,
        fill: &mut TensorFill<'_>,
    ) -> Result<(), GgufError> {
        self.write_header(out)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let len = match &t.data {
                TensorData::Bytes(data) => {
                    out.write_all(data)?;
                    data.len() as u64
                }
                TensorData::Deferred(n) => {
                    let mut counted = CountingWriter {
                        inner: &mut *out,
                        written: 0,
                    };
                    fill(i, &t.name, &mut counted)?;
                    if counted.written != *n {
                        return Err(GgufError::BadShape {
                            tensor: t.name.clone(),
                            dims: t.dims.clone(),
                            reason: format!(
                                "{} bytes were written for a tensor of {n} bytes",
                                counted.written
                            ),
                        });
                    }
                    *n
                }
            };
            let gap = len.next_multiple_of(self.alignment) - len;
            out.write_all(&vec![0u8; gap as usize])?;
        }
        Ok(())
    }

    /// Write the header (magic, metadata, tensor infos, padding to the alignment); returns
    /// each tensor's offset in the data section.
    fn write_header(&self, out: &mut dyn Write) -> Result<Vec<u64>, GgufError> {
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&self.version.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(&mut head, k);
            head.extend_from_slice(&v.type_id().to_le_bytes());
            put_value(&mut head, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            put_string(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.dtype.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len()).next_multiple_of(self.alignment);
        }
        if !self.tensors.is_empty() {
            pad(&mut head, self.alignment);
        }
        out.write_all(&head)?;
        Ok(offsets)
    }

    /// Serialize to a vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let mut v = Vec::new();
        self.write(&mut v)?;
        Ok(v)
    }
}

/// Counts the bytes a tensor's writer receives.
struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    written: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn pad(buf: &mut Vec<u8>, alignment: u64) {
    let len = buf.len() as u64;
    buf.resize(len.next_multiple_of(alignment) as usize, 0);
}

fn put_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn put_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.push(*x as u8),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(u8::from(*x)),
        Value::String(s) => put_string(buf, s),
        Value::Array(a) => put_array(buf, a),
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(buf: &mut Vec<u8>, a: &Array) {
    buf.extend_from_slice(&a.elem_type_id().to_le_bytes());
    buf.extend_from_slice(&(a.len() as u64).to_le_bytes());
    match a {
        Array::U8(v) => buf.extend_from_slice(v),
        Array::I8(v) => buf.extend(v.iter().map(|&x| x as u8)),
        Array::U16(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::I16(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::U32(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::I32(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::F32(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::Bool(v) => buf.extend(v.iter().map(|&x| u8::from(x))),
        Array::String(v) => v.iter().for_each(|s| put_string(buf, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(buf, inner)),
        Array::U64(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::I64(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
        Array::F64(v) => v
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes())),
    }
}
