//! Reading the options and inputs that JS passes to [`super::load::load_model`] and
//! [`super::WasmModel::generate`].

use js_sys::{Function, Reflect};
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use web_sys::AbortSignal;

use super::super::errors::WebError;
use crate::sampling::SamplerConfig;
use crate::text::ChatMessage;

/// Options of [`super::load::load_model`].
pub(super) struct LoadOptions {
    pub(super) context_length: Option<usize>,
    pub(super) on_progress: Option<Function>,
    pub(super) signal: Option<AbortSignal>,
    pub(super) name: Option<String>,
    /// Read through `Blob`s even where sync access handles exist.
    pub(super) force_blob: bool,
    /// Run one pass after loading so the kernels are compiled before the first request.
    pub(super) warmup: bool,
    /// The caller's `GPUDevice`, as the stand-in for `navigator.gpu` that hands it out
    /// (`gpu`, which the package builds from the `device` option: see `web/device.rs`).
    pub(super) device_gpu: Option<JsValue>,
    /// A `tokenizer.json` to use instead of the model's own tokenizer (`tokenizerJson`: the
    /// bytes the package fetched from the `tokenizerUrl` option).
    pub(super) tokenizer_json: Option<Vec<u8>>,
    /// The SHA-256 (lowercase hex) the model's single GGUF file must have (`integrity`):
    /// checked here for a `Blob` or a cached GGUF (a download checks it as it streams).
    pub(super) integrity: Option<String>,
    /// f32 arithmetic everywhere (`exact`: [`crate::session::Arithmetic::Exact`]).
    pub(super) exact: bool,
}

pub(super) fn get(value: &JsValue, key: &str) -> Option<JsValue> {
    if value.is_undefined() || value.is_null() {
        return None;
    }
    Reflect::get(value, &key.into())
        .ok()
        .filter(|v| !v.is_undefined() && !v.is_null())
}

pub(super) fn read_load_options(o: &JsValue) -> Result<LoadOptions, WebError> {
    let bad = |m: &str| WebError::new("InvalidArgument", format!("load: {m}"));
    let context_length = match get(o, "contextLength") {
        None => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|n| n.is_finite() && *n >= 1.0)
                .ok_or_else(|| bad("contextLength must be a number >= 1"))? as usize,
        ),
    };
    let device_gpu = match (get(o, "device"), get(o, "gpu")) {
        (None, _) => None,
        (Some(_), Some(gpu)) if gpu.is_object() => Some(gpu),
        (Some(_), _) => {
            return Err(bad(
                "the device option needs the package's BitNet.load, which hands the device to \
                 the GPU layer (the gpu option)",
            ))
        }
    };
    let tokenizer_json = match get(o, "tokenizerJson") {
        None => None,
        Some(v) if v.is_instance_of::<js_sys::Uint8Array>() => {
            Some(js_sys::Uint8Array::from(v).to_vec())
        }
        Some(_) => return Err(bad("tokenizerJson must be a Uint8Array")),
    };
    let integrity = match get(o, "integrity") {
        None => None,
        Some(v) => {
            let hex = v
                .as_string()
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                .ok_or_else(|| bad("integrity must be a SHA-256 as 64 hex digits"))?;
            Some(hex)
        }
    };
    Ok(LoadOptions {
        device_gpu,
        tokenizer_json,
        integrity,
        context_length,
        on_progress: get(o, "onProgress")
            .map(|v| {
                v.dyn_into()
                    .map_err(|_| bad("onProgress must be a function"))
            })
            .transpose()?,
        signal: get(o, "signal")
            .map(|v| {
                v.dyn_into()
                    .map_err(|_| bad("signal must be an AbortSignal"))
            })
            .transpose()?,
        name: get(o, "name").and_then(|v| v.as_string()),
        force_blob: get(o, "readThroughBlobs").is_some_and(|v| v.is_truthy()),
        warmup: get(o, "warmup").is_none_or(|v| v.is_truthy()),
        exact: match get(o, "exact") {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| bad("exact must be a boolean"))?,
        },
    })
}

/// Options of [`WasmModel::generate`] (JSON-able ones; `signal` is read separately).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct GenOptions {
    pub(super) max_tokens: Option<usize>,
    pub(super) temperature: Option<f32>,
    pub(super) top_k: Option<usize>,
    pub(super) top_p: Option<f32>,
    pub(super) min_p: Option<f32>,
    pub(super) repeat_penalty: Option<f32>,
    pub(super) repeat_last_n: Option<usize>,
    pub(super) frequency_penalty: Option<f32>,
    pub(super) presence_penalty: Option<f32>,
    pub(super) seed: Option<f64>,
    pub(super) stop: Option<StopList>,
    pub(super) ignore_eos: bool,
    /// Render the messages without the assistant prefix (continue the last message).
    pub(super) continue_final_message: bool,
    /// LoRA adapters (`loadAdapter`'s indices) applied to this generation, with their scales
    /// (default 1); none: the model alone.
    pub(super) adapters: Vec<AdapterChoice>,
}

/// One entry of `adapters`: `{ id, scale }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdapterChoice {
    pub(super) id: usize,
    pub(super) scale: Option<f32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum StopList {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: String,
}

impl GenOptions {
    pub(super) fn sampler(&self) -> Result<SamplerConfig, WebError> {
        let d = SamplerConfig::default();
        let cfg = SamplerConfig {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k: self.top_k.unwrap_or(d.top_k),
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
            repeat_last_n: self.repeat_last_n.unwrap_or(d.repeat_last_n),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            seed: self.seed.map_or(d.seed, |s| s.max(0.0) as u64),
        };
        cfg.validate()
            .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?;
        Ok(cfg)
    }

    pub(super) fn stops(&self) -> Vec<String> {
        match &self.stop {
            None => Vec::new(),
            Some(StopList::One(s)) => vec![s.clone()],
            Some(StopList::Many(v)) => v.clone(),
        }
    }
}

pub(super) fn parse_json<T: for<'de> Deserialize<'de> + Default>(
    value: &JsValue,
    what: &str,
) -> Result<T, WebError> {
    if value.is_undefined() || value.is_null() {
        return Ok(T::default());
    }
    let text = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
        .ok_or_else(|| WebError::new("InvalidArgument", format!("{what}: not JSON-able")))?;
    serde_json::from_str(&text)
        .map_err(|e| WebError::new("InvalidArgument", format!("{what}: {e}")))
}

pub(super) fn parse_messages(value: &JsValue) -> Result<Vec<ChatMessage>, WebError> {
    let messages: Vec<Message> = parse_json::<Option<Vec<Message>>>(value, "messages")?
        .ok_or_else(|| WebError::new("InvalidArgument", "messages must be an array"))?;
    Ok(messages
        .into_iter()
        .map(|m| ChatMessage::new(m.role, m.content))
        .collect())
}
