//! GGUF metadata values: the thirteen value types, including arrays of arrays.

use serde_json::json;

/// GGUF value type ids.
pub mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: elements of one type, stored unboxed so that a vocabulary of 128k
/// strings or a million-element score table costs what its elements cost.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    /// Arrays of arrays (each inner array has its own element type).
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    /// The GGUF type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => type_id::U8,
            Value::I8(_) => type_id::I8,
            Value::U16(_) => type_id::U16,
            Value::I16(_) => type_id::I16,
            Value::U32(_) => type_id::U32,
            Value::I32(_) => type_id::I32,
            Value::F32(_) => type_id::F32,
            Value::Bool(_) => type_id::BOOL,
            Value::String(_) => type_id::STRING,
            Value::Array(_) => type_id::ARRAY,
            Value::U64(_) => type_id::U64,
            Value::I64(_) => type_id::I64,
            Value::F64(_) => type_id::F64,
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// A JSON rendering; arrays longer than `max_items` are summarized.
    pub fn to_json(&self, max_items: usize) -> serde_json::Value {
        match self {
            Value::U8(v) => json!(v),
            Value::I8(v) => json!(v),
            Value::U16(v) => json!(v),
            Value::I16(v) => json!(v),
            Value::U32(v) => json!(v),
            Value::I32(v) => json!(v),
            // The shortest decimal that round-trips the f32 (1e-5, not 9.999999747378752e-6).
            Value::F32(v) => v
                .to_string()
                .parse::<f64>()
                .map_or(json!(null), |f| json!(f)),
            Value::Bool(v) => json!(v),
            Value::String(v) => json!(v),
            Value::U64(v) => json!(v),
            Value::I64(v) => json!(v),
            Value::F64(v) => json!(v),
            Value::Array(a) => a.to_json(max_items),
        }
    }
}

impl Array {
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF type id of the elements.
    pub fn elem_type_id(&self) -> u32 {
        match self {
            Array::U8(_) => type_id::U8,
            Array::I8(_) => type_id::I8,
            Array::U16(_) => type_id::U16,
            Array::I16(_) => type_id::I16,
            Array::U32(_) => type_id::U32,
            Array::I32(_) => type_id::I32,
            Array::F32(_) => type_id::F32,
            Array::Bool(_) => type_id::BOOL,
            Array::String(_) => type_id::STRING,
            Array::Array(_) => type_id::ARRAY,
            Array::U64(_) => type_id::U64,
            Array::I64(_) => type_id::I64,
            Array::F64(_) => type_id::F64,
        }
    }

    /// A JSON rendering; longer than `max_items` elements becomes a summary object.
    pub fn to_json(&self, max_items: usize) -> serde_json::Value {
        fn list<T: serde::Serialize>(v: &[T], max: usize, ty: &str) -> serde_json::Value {
            if v.len() <= max {
                json!(v)
            } else {
                json!({ "type": ty, "len": v.len(), "first": &v[..max.min(v.len())] })
            }
        }
        match self {
            Array::U8(v) => list(v, max_items, "u8"),
            Array::I8(v) => list(v, max_items, "i8"),
            Array::U16(v) => list(v, max_items, "u16"),
            Array::I16(v) => list(v, max_items, "i16"),
            Array::U32(v) => list(v, max_items, "u32"),
            Array::I32(v) => list(v, max_items, "i32"),
            Array::F32(v) => list(v, max_items, "f32"),
            Array::Bool(v) => list(v, max_items, "bool"),
            Array::String(v) => list(v, max_items, "string"),
            Array::U64(v) => list(v, max_items, "u64"),
            Array::I64(v) => list(v, max_items, "i64"),
            Array::F64(v) => list(v, max_items, "f64"),
            Array::Array(v) => {
                let inner: Vec<_> = v
                    .iter()
                    .take(max_items)
                    .map(|a| a.to_json(max_items))
                    .collect();
                if v.len() <= max_items {
                    json!(inner)
                } else {
                    json!({ "type": "array", "len": v.len(), "first": inner })
                }
            }
        }
    }
}

/// Bytes one element of a fixed-size type occupies in the file; strings and arrays return
/// their smallest possible encoding (an 8-byte length; a 12-byte header).
pub(crate) fn min_encoded_size(type_id: u32) -> Option<u64> {
    Some(match type_id {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 => 8,
        type_id::STRING => 8,
        type_id::ARRAY => 12,
        _ => return None,
    })
}
