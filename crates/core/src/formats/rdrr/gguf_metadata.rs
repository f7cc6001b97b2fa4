//! `gguf_metadata.json`: everything of a GGUF file except its tensor data, kept in an RDRR
//! folder converted from that GGUF, so the model runs with the same configuration, tokenizer
//! and chat template and converts back to the same GGUF.
//!
//! Lossless: every key/value keeps its GGUF type (`u32` stays `u32`, arrays keep their element
//! type, arrays of arrays nest), keys keep their order, and the tensor order is recorded.
//!
//! ```json
//! { "format": "tritium-gguf-metadata", "formatVersion": 1, "ggufVersion": 3, "alignment": 32,
//!   "metadata": [
//!     { "key": "general.architecture", "type": "string", "value": "llama" },
//!     { "key": "llama.rope.freq_base", "type": "f32", "value": 100000.0 },
//!     { "key": "tokenizer.ggml.tokens", "type": "array", "elementType": "string", "value": ["a"] },
//!     { "key": "x", "type": "array", "elementType": "array",
//!       "value": [ { "elementType": "u8", "value": [1, 2] } ] } ],
//!   "tensors": ["token_embd.weight", "blk.0.attn_norm.weight"] }
//! ```
//!
//! Floats are written as the exact decimal of their value (an `f32` widened to `f64`, so it
//! reads back bit for bit); a non-finite float is written as a string of its bits in hex
//! (`"0x7fc00000"`), which JSON numbers cannot hold.

use std::io::Write;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::manifest::Manifest;
use super::RdrrError;
use crate::formats::gguf::{Array, GgufFile, TensorInfo, Value};
use crate::formats::source::ModelFiles;

/// The file's name inside the RDRR folder.
pub const GGUF_METADATA_FILE: &str = "gguf_metadata.json";
/// The `format` field that identifies the file.
pub const GGUF_METADATA_FORMAT: &str = "tritium-gguf-metadata";
/// Arrays of arrays nested deeper than this are refused (as the GGUF reader refuses them).
const MAX_NESTING: u32 = 8;

/// A GGUF file's header without tensor data: version, alignment, metadata in order, and the
/// tensor names in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufMetadata {
    pub version: u32,
    pub alignment: u64,
    pub metadata: Vec<(String, Value)>,
    /// Tensor names in the GGUF's order.
    pub tensor_order: Vec<String>,
}

impl GgufMetadata {
    /// What a GGUF header holds, tensor data aside.
    pub fn from_gguf(file: &GgufFile) -> GgufMetadata {
        GgufMetadata {
            version: file.version,
            alignment: file.alignment,
            metadata: file.metadata.clone(),
            tensor_order: file.tensors.iter().map(|t| t.name.clone()).collect(),
        }
    }

    /// The GGUF metadata of an RDRR folder converted from a GGUF: the `extraFiles` entry with
    /// role `gguf-metadata`, else a file named [`GGUF_METADATA_FILE`]; `None` when the folder
    /// has neither (an RDRR model that did not come from a GGUF).
    pub fn load(
        manifest: &Manifest,
        files: &dyn ModelFiles,
    ) -> Result<Option<GgufMetadata>, RdrrError> {
        let name = manifest
            .extra_files
            .iter()
            .find(|f| f.role.as_deref() == Some("gguf-metadata"))
            .map_or(GGUF_METADATA_FILE, |f| f.file_name.as_str());
        if !files.exists(name) {
            return Ok(None);
        }
        let bytes = files.read_small(name, super::MAX_JSON_BYTES)?;
        Self::from_json(&bytes).map(Some)
    }

    /// The JSON document (pretty enough to read, compact enough for a 128k-token vocabulary:
    /// one line per metadata entry). Written straight from the values, never through a JSON
    /// tree (an element of a GGUF array takes 1 to 12 bytes; as a tree node it took 32 and
    /// more), and refused once it passes [`MAX_JSON_BYTES`](super::MAX_JSON_BYTES), the most
    /// a reader of the folder accepts.
    pub fn to_json(&self) -> Result<Vec<u8>, RdrrError> {
        let mut out = Capped {
            buf: Vec::new(),
            limit: super::MAX_JSON_BYTES as usize,
        };
        let head = format!(
            "{{\n  \"format\": \"{GGUF_METADATA_FORMAT}\",\n  \"formatVersion\": 1,\n  \
             \"ggufVersion\": {},\n  \"alignment\": {},\n  \"metadata\": [",
            self.version, self.alignment
        );
        let written = (|| -> std::io::Result<()> {
            out.write_all(head.as_bytes())?;
            for (i, (key, value)) in self.metadata.iter().enumerate() {
                out.write_all(if i == 0 { b"\n    " } else { b",\n    " })?;
                serde_json::to_writer(&mut out, &EntryJson { key, value })?;
            }
            out.write_all(b"\n  ],\n  \"tensors\": ")?;
            serde_json::to_writer(&mut out, &self.tensor_order)?;
            out.write_all(b"\n}\n")
        })();
        written.map_err(|_| {
            field_error(
                "metadata",
                format!(
                    "as JSON it takes more than the {} MiB an RDRR reader accepts",
                    super::MAX_JSON_BYTES >> 20
                ),
            )
        })?;
        Ok(out.buf)
    }

    /// Parse the JSON document; errors name the field at fault.
    pub fn from_json(bytes: &[u8]) -> Result<GgufMetadata, RdrrError> {
        let root: Json = super::json::parse(GGUF_METADATA_FILE, bytes)?;
        let top = root.as_object().ok_or_else(|| RdrrError::Json {
            file: GGUF_METADATA_FILE.into(),
            message: "the top level must be an object".into(),
        })?;
        match top.get("format").and_then(Json::as_str) {
            Some(GGUF_METADATA_FORMAT) => {}
            other => {
                return Err(field_error(
                    "format",
                    format!("expected {GGUF_METADATA_FORMAT:?}, found {other:?}"),
                ))
            }
        }
        let version = top
            .get("ggufVersion")
            .and_then(Json::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| field_error("ggufVersion", "expected a u32"))?;
        let alignment = top
            .get("alignment")
            .and_then(Json::as_u64)
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| field_error("alignment", "expected a power of two"))?;
        let entries = top
            .get("metadata")
            .and_then(Json::as_array)
            .ok_or_else(|| field_error("metadata", "expected an array"))?;
        let mut metadata = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("metadata[{i}]");
            let obj = entry
                .as_object()
                .ok_or_else(|| field_error(&at, "expected an object"))?;
            let key = obj
                .get("key")
                .and_then(Json::as_str)
                .ok_or_else(|| field_error(&format!("{at}.key"), "expected a string"))?;
            let at = format!("metadata[{key:?}]");
            metadata.push((key.to_string(), decode_value(obj, &at)?));
        }
        let tensor_order = match top.get("tensors") {
            None => Vec::new(),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| field_error("tensors", e.to_string()))?,
        };
        Ok(GgufMetadata {
            version,
            alignment,
            metadata,
            tensor_order,
        })
    }

    /// The GGUF view of an RDRR model converted from a GGUF: this metadata with the tensor
    /// infos of `manifest` (in the recorded order, then any others by name), laid out as a
    /// GGUF writer would lay them out. `ModelConfig`, `Tokenizer` and `ChatTemplate` read it
    /// as they read the original file.
    pub fn header(&self, manifest: &Manifest) -> Result<GgufFile, RdrrError> {
        let mut names: Vec<&str> = self
            .tensor_order
            .iter()
            .map(String::as_str)
            .filter(|n| manifest.tensors.contains_key(*n))
            .collect();
        let listed: std::collections::HashSet<&str> = names.iter().copied().collect();
        names.extend(
            manifest
                .tensors
                .keys()
                .map(String::as_str)
                .filter(|n| !listed.contains(n)),
        );
        let mut tensors = Vec::with_capacity(names.len());
        let mut offset = 0u64;
        for name in names {
            let t = &manifest.tensors[name];
            let n_bytes = t.size;
            tensors.push(TensorInfo {
                name: name.to_string(),
                dims: t.shape.iter().rev().copied().collect(),
                dtype: t.ggml_type()?,
                offset,
                n_bytes,
            });
            offset = offset
                .checked_add(n_bytes)
                .and_then(|end| end.checked_next_multiple_of(self.alignment))
                .ok_or_else(|| RdrrError::TensorTooLarge {
                    name: name.to_string(),
                    size: n_bytes,
                })?;
        }
        GgufFile::from_parts(self.version, self.metadata.clone(), tensors, self.alignment).map_err(
            |e| RdrrError::Field {
                file: GGUF_METADATA_FILE.into(),
                field: "metadata".into(),
                message: e.to_string(),
            },
        )
    }
}

fn field_error(field: &str, message: impl Into<String>) -> RdrrError {
    RdrrError::Field {
        file: GGUF_METADATA_FILE.into(),
        field: field.into(),
        message: message.into(),
    }
}

/// The JSON name of a GGUF value type id.
fn type_name(type_id: u32) -> &'static str {
    use crate::formats::gguf::type_id::*;
    match type_id {
        U8 => "u8",
        I8 => "i8",
        U16 => "u16",
        I16 => "i16",
        U32 => "u32",
        I32 => "i32",
        F32 => "f32",
        BOOL => "bool",
        STRING => "string",
        ARRAY => "array",
        U64 => "u64",
        I64 => "i64",
        _ => "f64",
    }
}

/// A byte buffer that refuses to grow past `limit`.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for Capped {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + bytes.len() > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A float as the exact decimal of its value, or a non-finite one as its bits in hex.
struct FloatJson {
    value: f64,
    bits: String,
}

impl FloatJson {
    fn f32(x: f32) -> FloatJson {
        FloatJson {
            value: f64::from(x),
            bits: if x.is_finite() {
                String::new()
            } else {
                format!("{:#010x}", x.to_bits())
            },
        }
    }

    fn f64(x: f64) -> FloatJson {
        FloatJson {
            value: x,
            bits: if x.is_finite() {
                String::new()
            } else {
                format!("{:#018x}", x.to_bits())
            },
        }
    }
}

impl Serialize for FloatJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.bits.is_empty() {
            true => s.serialize_f64(self.value),
            false => s.serialize_str(&self.bits),
        }
    }
}

/// One metadata entry: `{"elementType"?, "key", "type", "value"}` (keys in this order).
struct EntryJson<'a> {
    key: &'a str,
    value: &'a Value,
}

impl Serialize for EntryJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Value::Array(a) = self.value {
            m.serialize_entry("elementType", type_name(a.elem_type_id()))?;
        }
        m.serialize_entry("key", self.key)?;
        m.serialize_entry("type", type_name(self.value.type_id()))?;
        match self.value {
            Value::U8(x) => m.serialize_entry("value", x)?,
            Value::I8(x) => m.serialize_entry("value", x)?,
            Value::U16(x) => m.serialize_entry("value", x)?,
            Value::I16(x) => m.serialize_entry("value", x)?,
            Value::U32(x) => m.serialize_entry("value", x)?,
            Value::I32(x) => m.serialize_entry("value", x)?,
            Value::F32(x) => m.serialize_entry("value", &FloatJson::f32(*x))?,
            Value::Bool(x) => m.serialize_entry("value", x)?,
            Value::String(x) => m.serialize_entry("value", x)?,
            Value::U64(x) => m.serialize_entry("value", x)?,
            Value::I64(x) => m.serialize_entry("value", x)?,
            Value::F64(x) => m.serialize_entry("value", &FloatJson::f64(*x))?,
            Value::Array(a) => m.serialize_entry("value", &ArrayJson(a))?,
        }
        m.end()
    }
}

/// An array's elements (inner arrays as `{"elementType", "value"}` objects).
struct ArrayJson<'a>(&'a Array);

impl Serialize for ArrayJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Array::U8(v) => v.serialize(s),
            Array::I8(v) => v.serialize(s),
            Array::U16(v) => v.serialize(s),
            Array::I16(v) => v.serialize(s),
            Array::U32(v) => v.serialize(s),
            Array::I32(v) => v.serialize(s),
            Array::F32(v) => s.collect_seq(v.iter().map(|&x| FloatJson::f32(x))),
            Array::Bool(v) => v.serialize(s),
            Array::String(v) => v.serialize(s),
            Array::U64(v) => v.serialize(s),
            Array::I64(v) => v.serialize(s),
            Array::F64(v) => s.collect_seq(v.iter().map(|&x| FloatJson::f64(x))),
            Array::Array(v) => s.collect_seq(v.iter().map(InnerArrayJson)),
        }
    }
}

struct InnerArrayJson<'a>(&'a Array);

impl Serialize for InnerArrayJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("elementType", type_name(self.0.elem_type_id()))?;
        m.serialize_entry("value", &ArrayJson(self.0))?;
        m.end()
    }
}

fn decode_value(obj: &Map<String, Json>, at: &str) -> Result<Value, RdrrError> {
    let ty = obj
        .get("type")
        .and_then(Json::as_str)
        .ok_or_else(|| field_error(&format!("{at}.type"), "expected a string"))?;
    let value = obj
        .get("value")
        .ok_or_else(|| field_error(&format!("{at}.value"), "missing"))?;
    let at = format!("{at}.value");
    if ty == "array" {
        let elem = obj
            .get("elementType")
            .and_then(Json::as_str)
            .ok_or_else(|| field_error(&format!("{at}.elementType"), "expected a string"))?;
        return Ok(Value::Array(decode_array(elem, value, &at, 1)?));
    }
    decode_scalar(ty, value, &at)
}

fn decode_scalar(ty: &str, v: &Json, at: &str) -> Result<Value, RdrrError> {
    let bad = || field_error(at, format!("not a valid {ty}: {v}"));
    let int = || v.as_i64().ok_or_else(bad);
    let uint = || v.as_u64().ok_or_else(bad);
    Ok(match ty {
        "u8" => Value::U8(u8::try_from(uint()?).map_err(|_| bad())?),
        "i8" => Value::I8(i8::try_from(int()?).map_err(|_| bad())?),
        "u16" => Value::U16(u16::try_from(uint()?).map_err(|_| bad())?),
        "i16" => Value::I16(i16::try_from(int()?).map_err(|_| bad())?),
        "u32" => Value::U32(u32::try_from(uint()?).map_err(|_| bad())?),
        "i32" => Value::I32(i32::try_from(int()?).map_err(|_| bad())?),
        "u64" => Value::U64(uint()?),
        "i64" => Value::I64(int()?),
        "f32" => Value::F32(decode_f32(v).ok_or_else(bad)?),
        "f64" => Value::F64(decode_f64(v).ok_or_else(bad)?),
        "bool" => Value::Bool(v.as_bool().ok_or_else(bad)?),
        "string" => Value::String(v.as_str().ok_or_else(bad)?.to_string()),
        other => return Err(field_error(at, format!("unknown GGUF type {other:?}"))),
    })
}

fn decode_f32(v: &Json) -> Option<f32> {
    match v {
        // Exact: the number is an f32 written as the f64 of the same value.
        Json::Number(n) => n.as_f64().map(|x| x as f32),
        Json::String(s) => u32::from_str_radix(s.strip_prefix("0x")?, 16)
            .ok()
            .map(f32::from_bits),
        _ => None,
    }
}

fn decode_f64(v: &Json) -> Option<f64> {
    match v {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => u64::from_str_radix(s.strip_prefix("0x")?, 16)
            .ok()
            .map(f64::from_bits),
        _ => None,
    }
}

fn decode_array(elem: &str, v: &Json, at: &str, depth: u32) -> Result<Array, RdrrError> {
    if depth > MAX_NESTING {
        return Err(field_error(
            at,
            format!("arrays nested deeper than {MAX_NESTING}"),
        ));
    }
    let items = v
        .as_array()
        .ok_or_else(|| field_error(at, "expected an array"))?;
    macro_rules! each {
        ($variant:ident, $ty:literal) => {{
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match decode_scalar($ty, item, &format!("{at}[{i}]"))? {
                    Value::$variant(x) => out.push(x),
                    _ => unreachable!("decode_scalar returns the type it was asked for"),
                }
            }
            Array::$variant(out)
        }};
    }
    Ok(match elem {
        "u8" => each!(U8, "u8"),
        "i8" => each!(I8, "i8"),
        "u16" => each!(U16, "u16"),
        "i16" => each!(I16, "i16"),
        "u32" => each!(U32, "u32"),
        "i32" => each!(I32, "i32"),
        "u64" => each!(U64, "u64"),
        "i64" => each!(I64, "i64"),
        "f32" => each!(F32, "f32"),
        "f64" => each!(F64, "f64"),
        "bool" => each!(Bool, "bool"),
        "string" => each!(String, "string"),
        "array" => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let at = format!("{at}[{i}]");
                let inner_elem =
                    item.get("elementType")
                        .and_then(Json::as_str)
                        .ok_or_else(|| {
                            field_error(&format!("{at}.elementType"), "expected a string")
                        })?;
                let inner = item
                    .get("value")
                    .ok_or_else(|| field_error(&format!("{at}.value"), "missing"))?;
                out.push(decode_array(inner_elem, inner, &at, depth + 1)?);
            }
            Array::Array(out)
        }
        other => return Err(field_error(at, format!("unknown GGUF type {other:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GgufMetadata {
        GgufMetadata {
            version: 3,
            alignment: 64,
            metadata: vec![
                ("general.architecture".into(), Value::String("llama".into())),
                ("a.u8".into(), Value::U8(255)),
                ("a.i8".into(), Value::I8(-128)),
                ("a.u16".into(), Value::U16(65535)),
                ("a.i16".into(), Value::I16(-32768)),
                ("a.u32".into(), Value::U32(u32::MAX)),
                ("a.i32".into(), Value::I32(i32::MIN)),
                ("a.u64".into(), Value::U64(u64::MAX)),
                ("a.i64".into(), Value::I64(i64::MIN)),
                ("a.eps".into(), Value::F32(1e-5)),
                ("a.tiny".into(), Value::F32(f32::from_bits(1))),
                ("a.nan".into(), Value::F32(f32::from_bits(0x7fc0_0123))),
                ("a.inf".into(), Value::F64(f64::NEG_INFINITY)),
                ("a.pi".into(), Value::F64(std::f64::consts::PI)),
                ("a.yes".into(), Value::Bool(true)),
                (
                    "a.scores".into(),
                    Value::Array(Array::F32(vec![-1000.0, 0.1, f32::MAX, -0.0, f32::NAN])),
                ),
                (
                    "a.tokens".into(),
                    Value::Array(Array::String(vec!["\"q\"".into(), "é\n\u{0}".into()])),
                ),
                (
                    "a.nested".into(),
                    Value::Array(Array::Array(vec![
                        Array::U8(vec![1, 2]),
                        Array::Array(vec![Array::Bool(vec![false])]),
                        Array::I64(vec![]),
                    ])),
                ),
            ],
            tensor_order: vec!["b".into(), "a".into()],
        }
    }

    /// Bit-level equality (NaN payloads and -0.0 included).
    fn same(a: &GgufMetadata, b: &GgufMetadata) -> bool {
        format!("{a:?}") == format!("{b:?}")
            && a.metadata.iter().zip(&b.metadata).all(|(x, y)| {
                let bits = |v: &Value| match v {
                    Value::F32(f) => vec![u64::from(f.to_bits())],
                    Value::F64(f) => vec![f.to_bits()],
                    Value::Array(Array::F32(v)) => {
                        v.iter().map(|f| u64::from(f.to_bits())).collect()
                    }
                    _ => vec![],
                };
                bits(&x.1) == bits(&y.1)
            })
    }

    #[test]
    fn every_type_round_trips_bit_for_bit() {
        let m = sample();
        let json = m.to_json().unwrap();
        let back = GgufMetadata::from_json(&json).unwrap();
        assert!(same(&m, &back), "{}", String::from_utf8_lossy(&json));
        // f32 values are written as the exact value, not a rounded decimal.
        assert!(String::from_utf8_lossy(&json).contains("9.999999747378752e-6"));
    }

    #[test]
    fn damaged_files_name_the_field() {
        let json = String::from_utf8(sample().to_json().unwrap()).unwrap();
        for (from, to, field) in [
            ("\"u8\",\"value\":255", "\"u8\",\"value\":256", "a.u8"),
            ("\"type\":\"bool\"", "\"type\":\"boolean\"", "a.yes"),
            ("tritium-gguf-metadata", "other", "format"),
            ("\"alignment\": 64", "\"alignment\": 48", "alignment"),
        ] {
            let bad = json.replacen(from, to, 1);
            assert_ne!(bad, json, "{from}");
            let err = GgufMetadata::from_json(bad.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{err}");
        }
    }
}
