//! Reading a request body as a JSON object, and its fields with the types the APIs give them.
//! Each wrong value is a 400 naming the field; fields the server does not know are ignored;
//! `null` is the same as absent.

use axum::body::Body;
use serde_json::{Map, Value};

use super::error::ApiError;

/// The body of `body`, at most `limit` bytes (413 beyond), as a JSON object (400 when it is
/// not UTF-8, not JSON, or not an object).
pub async fn json_object(body: Body, limit: usize) -> Result<Map<String, Value>, ApiError> {
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            // axum reports a body over the limit as a `LengthLimitError` somewhere in the
            // error's sources; anything else is a broken upload.
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if s.is::<http_body_util::LengthLimitError>() {
                    return Err(ApiError::too_large(limit));
                }
                source = s.source();
            }
            return Err(ApiError::invalid(format!(
                "could not read the request body: {e}"
            )));
        }
    };
    parse_object(&bytes)
}

/// [`json_object`] for bytes already read.
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::invalid(format!(
            "the request body is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            "the request body is empty: send a JSON object",
        ));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::invalid(format!(
            "the request body must be a JSON object, not {}",
            type_name(&other)
        ))),
        Err(e) => Err(ApiError::invalid(format!(
            "the request body is not valid JSON: {e}"
        ))),
    }
}

/// The JSON type of a value, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Typed reads of one object's fields; `path` prefixes field names in errors (`options.`).
pub struct Fields<'a> {
    pub map: &'a Map<String, Value>,
    pub path: &'static str,
}

impl<'a> Fields<'a> {
    pub fn new(map: &'a Map<String, Value>) -> Self {
        Fields { map, path: "" }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, want: &str, got: &Value) -> ApiError {
        let name = format!("{}{key}", self.path);
        ApiError::invalid_param(
            &name,
            format!("`{name}` must be {want}, got {}", type_name(got)),
        )
    }

    pub fn string(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "a boolean", v)),
        }
    }

    /// A finite number.
    pub fn number(&self, key: &str) -> Result<Option<f64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => match n.as_f64() {
                Some(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(self.wrong(key, "a finite number", v)),
            },
            Some(v) => Err(self.wrong(key, "a number", v)),
        }
    }

    /// A number in `[lo, hi]`.
    pub fn number_in(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
        match self.number(key)? {
            Some(x) if !(lo..=hi).contains(&x) => {
                let name = format!("{}{key}", self.path);
                Err(ApiError::invalid_param(
                    &name,
                    format!("`{name}` must be between {lo} and {hi}, got {x}"),
                ))
            }
            x => Ok(x),
        }
    }

    /// A whole number (an integer, or a float with no fraction, as JavaScript clients send).
    pub fn integer(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v @ Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    return Ok(Some(i));
                }
                if n.as_u64().is_some() {
                    return Err(self.wrong(key, "an integer below 2^63", v));
                }
                match n.as_f64() {
                    Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(Some(x as i64)),
                    _ => Err(self.wrong(key, "an integer", v)),
                }
            }
            Some(v) => Err(self.wrong(key, "an integer", v)),
        }
    }

    /// A seed: any integer, negative ones taken as their 64-bit pattern.
    pub fn seed(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            _ => Ok(self.integer(key)?.map(|i| i as u64)),
        }
    }

    /// An integer at least `min`.
    pub fn integer_min(&self, key: &str, min: i64) -> Result<Option<i64>, ApiError> {
        match self.integer(key)? {
            Some(i) if i < min => {
                let name = format!("{}{key}", self.path);
                Err(ApiError::invalid_param(
                    &name,
                    format!("`{name}` must be at least {min}, got {i}"),
                ))
            }
            i => Ok(i),
        }
    }

    /// A string or a list of strings (`stop`); an empty list is none.
    pub fn strings(&self, key: &str) -> Result<Vec<String>, ApiError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(v @ Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(self.wrong(key, "a string or a list of strings", v)),
                })
                .collect(),
            Some(v) => Err(self.wrong(key, "a string or a list of strings", v)),
        }
    }

    /// A nested object (`options`, `stream_options`).
    pub fn object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(self.wrong(key, "an object", v)),
        }
    }

    pub fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(self.wrong(key, "an array", v)),
        }
    }

    /// Whether the field is present and not null.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> Map<String, Value> {
        parse_object(s.as_bytes()).unwrap()
    }

    #[test]
    fn bodies_that_are_not_json_objects_are_refused() {
        for bad in [
            &b""[..],
            b"  ",
            b"{",
            b"[]",
            b"3",
            b"\"x\"",
            b"{\"a\": \xff}",
        ] {
            let e = parse_object(bad).unwrap_err();
            assert_eq!(e.status, 400, "{bad:?}");
        }
        assert!(parse_object(b"{\"a\": 1}").is_ok());
    }

    #[test]
    fn fields_are_read_with_their_types() {
        let m = obj(
            r#"{"t": 0.5, "n": 3, "f": 2.0, "s": "x", "l": ["a", "b"], "z": null,
                        "big": 18446744073709551615, "neg": -1, "b": true}"#,
        );
        let f = Fields::new(&m);
        assert_eq!(f.number("t").unwrap(), Some(0.5));
        assert_eq!(f.integer("n").unwrap(), Some(3));
        assert_eq!(f.integer("f").unwrap(), Some(2));
        assert!(f.integer("t").is_err());
        assert_eq!(f.string("s").unwrap(), Some("x"));
        assert!(f.string("n").is_err());
        assert_eq!(f.strings("s").unwrap(), vec!["x"]);
        assert_eq!(f.strings("l").unwrap(), vec!["a", "b"]);
        assert!(f.strings("n").is_err());
        assert_eq!(f.integer("z").unwrap(), None);
        assert_eq!(f.seed("big").unwrap(), Some(u64::MAX));
        assert_eq!(f.seed("neg").unwrap(), Some(u64::MAX));
        assert!(f.integer("big").is_err());
        assert_eq!(f.bool("b").unwrap(), Some(true));
        let e = f.number_in("t", 1.0, 2.0).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("t"));
    }
}
