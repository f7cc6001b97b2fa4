//! Reading JSON fields with errors that name the file and the field (`shards[3].size`,
//! `runtimeOptimizations.preferredKernels.matmul`), not just a line and column.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::RdrrError;

/// Parse a whole JSON document. serde_json limits nesting depth, so a hostile file cannot
/// overflow the stack.
pub(crate) fn parse(file: &str, bytes: &[u8]) -> Result<Value, RdrrError> {
    serde_json::from_slice(bytes).map_err(|e| RdrrError::Json {
        file: file.to_string(),
        message: e.to_string(),
    })
}

/// Deserialize `value`, naming `file` and `path` on failure.
pub(crate) fn value_at<'a, T: Deserialize<'a>>(
    file: &str,
    path: &str,
    value: &'a Value,
) -> Result<T, RdrrError> {
    T::deserialize(value).map_err(|e| RdrrError::Field {
        file: file.to_string(),
        field: path.to_string(),
        message: e.to_string(),
    })
}

/// The path of a map entry: `tensors["model.embed_tokens.weight"]`.
pub(crate) fn key_path(path: &str, key: &str) -> String {
    format!("{path}[{key:?}]")
}

/// A JSON object being read, with the path that leads to it.
pub(crate) struct Obj<'a> {
    pub file: &'a str,
    pub path: String,
    pub map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    /// `value` as an object at `path` (`""` for a file's top level).
    pub fn new(file: &'a str, path: String, value: &'a Value) -> Result<Self, RdrrError> {
        match value {
            Value::Object(map) => Ok(Obj { file, path, map }),
            other if path.is_empty() => Err(RdrrError::Json {
                file: file.to_string(),
                message: format!("the top level must be an object, found {}", kind(other)),
            }),
            other => Err(RdrrError::Field {
                file: file.to_string(),
                field: path,
                message: format!("expected an object, found {}", kind(other)),
            }),
        }
    }

    /// The path of field `key` of this object.
    pub fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// An error about field `key`.
    pub fn error(&self, key: &str, message: impl Into<String>) -> RdrrError {
        RdrrError::Field {
            file: self.file.to_string(),
            field: self.field_path(key),
            message: message.into(),
        }
    }

    /// The raw value of `key`; `null` counts as absent.
    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Field `key` deserialized, or `None` when absent or `null`.
    pub fn get<T: Deserialize<'a>>(&self, key: &str) -> Result<Option<T>, RdrrError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => value_at(self.file, &self.field_path(key), v).map(Some),
        }
    }

    /// Field `key` as an object, or `None` when absent or `null`.
    pub fn object(&self, key: &str) -> Result<Option<Obj<'a>>, RdrrError> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => Obj::new(self.file, self.field_path(key), v).map(Some),
        }
    }

    /// Field `key` as one of a fixed set of names.
    pub fn named<T>(
        &self,
        key: &str,
        from_name: fn(&str) -> Option<T>,
        names: &[&str],
    ) -> Result<Option<T>, RdrrError> {
        match self.get::<String>(key)? {
            None => Ok(None),
            Some(value) => match from_name(&value) {
                Some(v) => Ok(Some(v)),
                None => Err(self.unknown(key, value, names)),
            },
        }
    }

    /// An "unknown value" error for field `key`.
    pub fn unknown(&self, key: &str, value: String, names: &[&str]) -> RdrrError {
        RdrrError::UnknownVariant {
            file: self.file.to_string(),
            field: self.field_path(key),
            value,
            expected: names.join(", "),
        }
    }
}

/// A JSON value's kind, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// Typed reading of the large parts (shards, groups, tensors)
//
// A `Value` tree takes many times the text it comes from: each small object is a B-tree node
// of several hundred bytes, each string an allocation of its own. The parts of a manifest that
// can be large are
// therefore read straight from the text into typed entries, whose size is a small multiple of
// the text's; the entry that fails is named by its path, as `value_at` names a field.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Where a typed read failed: the path of the entry and serde's message (the first failure).
#[derive(Default)]
pub(crate) struct Failure(RefCell<Option<(String, String)>>);

impl Failure {
    /// Record `path` and `message` unless a deeper failure was recorded first.
    pub fn note(&self, path: impl FnOnce() -> String, message: &dyn fmt::Display) {
        let mut slot = self.0.borrow_mut();
        if slot.is_none() {
            *slot = Some((path(), message.to_string()));
        }
    }

    /// The error to report for a read of `file` that failed with `e`: the entry recorded (a
    /// value of the wrong kind), or the file itself (not JSON, or not the shape expected at its
    /// top level).
    pub fn error(self, file: &str, e: serde_json::Error) -> RdrrError {
        let syntax = !matches!(e.classify(), serde_json::error::Category::Data);
        match self.0.into_inner() {
            Some((field, message)) if !syntax => RdrrError::Field {
                file: file.to_string(),
                field,
                message,
            },
            _ => RdrrError::Json {
                file: file.to_string(),
                message: e.to_string(),
            },
        }
    }
}

/// A JSON array read into `Vec<T>` (`null`: `None`), each element named `path[i]` on failure.
pub(crate) struct Items<'f, T> {
    pub path: String,
    pub failed: &'f Failure,
    pub item: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Items<'_, T> {
    type Value = Option<Vec<T>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Grown as elements arrive, never sized from a hint.
        let mut out = Vec::new();
        loop {
            match seq.next_element::<T>() {
                Ok(Some(v)) => out.push(v),
                Ok(None) => return Ok(Some(out)),
                Err(e) => {
                    let i = out.len();
                    self.failed.note(|| format!("{}[{i}]", self.path), &e);
                    return Err(e);
                }
            }
        }
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Items<'_, T> {
    type Value = Option<Vec<T>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A JSON object read into `(key, T)` entries in file order (`null`: `None`), each named
/// `path["key"]` on failure.
pub(crate) struct Entries<'f, T> {
    pub path: String,
    pub failed: &'f Failure,
    pub item: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Entries<'_, T> {
    type Value = Option<Vec<(String, T)>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match map.next_value::<T>() {
                Ok(v) => out.push((key, v)),
                Err(e) => {
                    self.failed.note(|| key_path(&self.path, &key), &e);
                    return Err(e);
                }
            }
        }
        Ok(Some(out))
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Entries<'_, T> {
    type Value = Option<Vec<(String, T)>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// Read a whole JSON document with `seed`, then require that nothing but whitespace follows.
/// Map the error with [`Failure::error`].
pub(crate) fn read_with<'de, S: DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> Result<S::Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}
