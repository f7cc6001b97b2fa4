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
