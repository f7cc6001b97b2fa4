//! The GGUF v2/v3 reader: header, metadata and tensor infos, read through a [`ByteSource`]
//! in bounded chunks. Every length and count is checked against the bytes actually present
//! before anything is allocated, so no input can make the reader allocate without bound.

use std::collections::{HashMap, HashSet};

use super::value::{min_encoded_size, type_id, Array, Value};
use super::{GgufError, GgufFile, TensorInfo, DEFAULT_ALIGNMENT, MAX_DIMS};
use crate::formats::source::ByteSource;
use crate::quant::GgmlType;

/// Longest metadata key we accept (ggml writes keys of a few dozen bytes).
const MAX_KEY_LEN: u64 = 64 * 1024;
/// Longest string value (chat templates are a few KiB; this leaves room for anything real).
const MAX_STRING_LEN: u64 = 64 * 1024 * 1024;
/// Arrays of arrays deeper than this are refused.
const MAX_NESTING: u32 = 8;
/// Bytes fetched from the source per read while walking the header.
const CHUNK: usize = 1 << 20;

/// A forward-only reader over a byte source with a small window buffer.
struct Cursor<'a> {
    src: &'a dyn ByteSource,
    len: u64,
    pos: u64,
    window: Vec<u8>,
    window_start: u64,
}

impl<'a> Cursor<'a> {
    fn new(src: &'a dyn ByteSource) -> Self {
        Cursor {
            src,
            len: src.len(),
            pos: 0,
            window: Vec::new(),
            window_start: 0,
        }
    }

    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    /// The next `n` bytes; fails with `Truncated` naming `what` if the source ends first.
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&[u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                needed: n,
                len: self.len,
            });
        }
        let n_usize = n as usize; // n <= remaining <= len, and the window fits in memory below
        let window_end = self.window_start + self.window.len() as u64;
        if self.pos < self.window_start || self.pos + n > window_end {
            let want = (n_usize.max(CHUNK) as u64).min(self.remaining());
            self.window = self.src.read_vec(self.pos, want)?;
            self.window_start = self.pos;
        }
        let start = (self.pos - self.window_start) as usize;
        self.pos += n;
        Ok(&self.window[start..start + n_usize])
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self, limit: u64, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        if len > limit {
            return Err(GgufError::TooLarge {
                what: what(),
                value: len,
                limit,
            });
        }
        let bytes = self.take(len, what)?.to_vec();
        String::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8 { what: what() })
    }

    /// Read `count` fixed-size elements of `size` bytes each, converted by `f`.
    fn fixed_array<T>(
        &mut self,
        count: u64,
        size: u64,
        what: &dyn Fn() -> String,
        f: impl Fn(&[u8]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        let total = count.checked_mul(size).ok_or_else(|| GgufError::TooLarge {
            what: what(),
            value: count,
            limit: self.remaining() / size,
        })?;
        let bytes = self.take(total, what)?;
        Ok(bytes.chunks_exact(size as usize).map(f).collect())
    }

    fn value(&mut self, ty: u32, depth: u32, key: &str) -> Result<Value, GgufError> {
        let what = || format!("metadata value '{key}'");
        Ok(match ty {
            type_id::U8 => Value::U8(self.take(1, &what)?[0]),
            type_id::I8 => Value::I8(self.take(1, &what)?[0] as i8),
            type_id::U16 => Value::U16(u16::from_le_bytes(arr(self.take(2, &what)?))),
            type_id::I16 => Value::I16(i16::from_le_bytes(arr(self.take(2, &what)?))),
            type_id::U32 => Value::U32(self.u32(&what)?),
            type_id::I32 => Value::I32(self.u32(&what)? as i32),
            type_id::F32 => Value::F32(f32::from_bits(self.u32(&what)?)),
            type_id::U64 => Value::U64(self.u64(&what)?),
            type_id::I64 => Value::I64(self.u64(&what)? as i64),
            type_id::F64 => Value::F64(f64::from_bits(self.u64(&what)?)),
            type_id::BOOL => Value::Bool(bool_of(self.take(1, &what)?[0], key)?),
            type_id::STRING => Value::String(self.string(MAX_STRING_LEN, &what)?),
            type_id::ARRAY => Value::Array(self.array(depth + 1, key)?),
            other => {
                return Err(GgufError::UnknownValueType {
                    key: key.to_string(),
                    type_id: other,
                })
            }
        })
    }

    fn array(&mut self, depth: u32, key: &str) -> Result<Array, GgufError> {
        if depth > MAX_NESTING {
            return Err(GgufError::NestingTooDeep {
                key: key.to_string(),
                limit: MAX_NESTING,
            });
        }
        let what = || format!("array '{key}'");
        let elem = self.u32(&what)?;
        let count = self.u64(&what)?;
        let min = min_encoded_size(elem).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            type_id: elem,
        })?;
        // Every element occupies at least `min` bytes: a count the file cannot hold is refused
        // before any allocation.
        if count > self.remaining() / min {
            return Err(GgufError::Truncated {
                what: format!("array '{key}' of {count} elements"),
                offset: self.pos,
                needed: count.saturating_mul(min),
                len: self.len,
            });
        }
        Ok(match elem {
            type_id::U8 => Array::U8(self.fixed_array(count, 1, &what, |b| b[0])?),
            type_id::I8 => Array::I8(self.fixed_array(count, 1, &what, |b| b[0] as i8)?),
            type_id::U16 => {
                Array::U16(self.fixed_array(count, 2, &what, |b| u16::from_le_bytes(arr(b)))?)
            }
            type_id::I16 => {
                Array::I16(self.fixed_array(count, 2, &what, |b| i16::from_le_bytes(arr(b)))?)
            }
            type_id::U32 => {
                Array::U32(self.fixed_array(count, 4, &what, |b| u32::from_le_bytes(arr(b)))?)
            }
            type_id::I32 => {
                Array::I32(self.fixed_array(count, 4, &what, |b| i32::from_le_bytes(arr(b)))?)
            }
            type_id::F32 => {
                Array::F32(self.fixed_array(count, 4, &what, |b| f32::from_le_bytes(arr(b)))?)
            }
            type_id::U64 => {
                Array::U64(self.fixed_array(count, 8, &what, |b| u64::from_le_bytes(arr(b)))?)
            }
            type_id::I64 => {
                Array::I64(self.fixed_array(count, 8, &what, |b| i64::from_le_bytes(arr(b)))?)
            }
            type_id::F64 => {
                Array::F64(self.fixed_array(count, 8, &what, |b| f64::from_le_bytes(arr(b)))?)
            }
            type_id::BOOL => {
                let raw = self.fixed_array(count, 1, &what, |b| b[0])?;
                Array::Bool(
                    raw.into_iter()
                        .map(|b| bool_of(b, key))
                        .collect::<Result<_, _>>()?,
                )
            }
            type_id::STRING => {
                let mut v = Vec::new();
                for _ in 0..count {
                    v.push(self.string(MAX_STRING_LEN, &what)?);
                }
                Array::String(v)
            }
            _ => {
                let mut v = Vec::new();
                for _ in 0..count {
                    v.push(self.array(depth + 1, key)?);
                }
                Array::Array(v)
            }
        })
    }
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

fn bool_of(b: u8, key: &str) -> Result<bool, GgufError> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(GgufError::InvalidBool {
            key: key.to_string(),
            value: v,
        }),
    }
}

/// Parse a GGUF header, metadata and tensor infos from `src`. Tensor data is not read; each
/// tensor's byte range is checked to lie inside the file.
pub fn read(src: &dyn ByteSource) -> Result<GgufFile, GgufError> {
    let mut c = Cursor::new(src);
    let magic: [u8; 4] = arr(c.take(4, &|| "GGUF magic".into())?);
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(&|| "GGUF version".into())?;
    match version {
        2 | 3 => {}
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => return Err(GgufError::BigEndian),
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    let n_tensors = c.u64(&|| "tensor count".into())?;
    let n_kv = c.u64(&|| "metadata count".into())?;
    // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
    // least 8 + 4 + 8 + 4 + 8.
    if n_kv > c.remaining() / 13 {
        return Err(GgufError::TooLarge {
            what: "metadata count".into(),
            value: n_kv,
            limit: c.remaining() / 13,
        });
    }
    if n_tensors > c.remaining() / 32 {
        return Err(GgufError::TooLarge {
            what: "tensor count".into(),
            value: n_tensors,
            limit: c.remaining() / 32,
        });
    }

    let mut metadata: Vec<(String, Value)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for i in 0..n_kv {
        let key = c.string(MAX_KEY_LEN, &|| format!("metadata key #{i}"))?;
        let ty = c.u32(&|| format!("type of metadata '{key}'"))?;
        let value = c.value(ty, 0, &key)?;
        if index.insert(key.clone(), metadata.len()).is_some() {
            return Err(GgufError::DuplicateKey { key });
        }
        metadata.push((key, value));
    }

    let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
        Some(v) => {
            return Err(GgufError::BadAlignment {
                value: format!("{v:?}"),
            })
        }
    };

    let mut tensors = Vec::new();
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        let name = c.string(MAX_KEY_LEN, &|| format!("name of tensor #{i}"))?;
        let what = || format!("tensor info '{name}'");
        let n_dims = c.u32(&what)?;
        if n_dims as usize > MAX_DIMS {
            return Err(GgufError::TooManyDims {
                tensor: name,
                n_dims,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&what)?);
        }
        let type_id = c.u32(&what)?;
        let offset = c.u64(&what)?;
        let dtype = GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownDtype {
            tensor: name.clone(),
            id: type_id,
        })?;
        let n_bytes = tensor_bytes(&name, &dims, dtype)?;
        if offset % alignment != 0 {
            return Err(GgufError::Misaligned {
                tensor: name,
                offset,
                alignment,
            });
        }
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { name });
        }
        tensors.push(TensorInfo {
            name,
            dims,
            dtype,
            offset,
            n_bytes,
        });
    }

    let data_offset = c
        .pos
        .checked_next_multiple_of(alignment)
        .unwrap_or(u64::MAX);
    let file_len = src.len();
    if !tensors.is_empty() {
        check_tensor_ranges(&tensors, data_offset, file_len)?;
    }
    Ok(GgufFile {
        version,
        metadata,
        index,
        tensors,
        alignment,
        data_offset,
        file_len,
    })
}

/// Bytes of a tensor with GGUF dims (innermost first), checking the shape.
fn tensor_bytes(name: &str, dims: &[u64], dtype: GgmlType) -> Result<u64, GgufError> {
    let bad = |reason: String| GgufError::BadShape {
        tensor: name.to_string(),
        dims: dims.to_vec(),
        reason,
    };
    if dims.iter().any(|&d| d > i64::MAX as u64) {
        return Err(bad("negative dimension".into()));
    }
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| bad("element count overflows".into()))?;
    if dtype == GgmlType::TL1 {
        return Err(GgufError::UnsupportedDtype {
            tensor: name.to_string(),
            dtype,
            reason: "the BitNet fork's TL1 layout is kernel-specific; convert the model to I2_S"
                .into(),
        });
    }
    let row = dims.first().copied().unwrap_or(1);
    let gran = dtype.row_granularity();
    if dtype != GgmlType::I2_S && row % gran != 0 {
        return Err(bad(format!(
            "row length {row} is not a multiple of the {dtype} block size {gran}"
        )));
    }
    dtype.tensor_bytes(n).ok_or_else(|| {
        bad(format!(
            "{n} elements is not a whole number of {dtype} blocks"
        ))
    })
}

/// Every tensor must lie inside the data section and no two may overlap.
fn check_tensor_ranges(
    tensors: &[TensorInfo],
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    let data_len = file_len.saturating_sub(data_offset);
    for t in tensors {
        let end = t.offset.saturating_add(t.n_bytes);
        if end > data_len || data_offset > file_len {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                end: data_offset.saturating_add(end),
                len: file_len,
            });
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        if pair[0].offset + pair[0].n_bytes > pair[1].offset {
            return Err(GgufError::Overlap {
                a: pair[0].name.clone(),
                b: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}
