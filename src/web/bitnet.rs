//! The npm package's model object: [`WasmModel`], a model loaded onto this page's (or
//! worker's) WebGPU device, which `js/index.js` wraps as the `BitNet` class.
//!
//! ```js
//! const model = await load_model('smollm2', { contextLength: 2048, onProgress });
//! const report = await model.generate('Once upon a time', { maxTokens: 32, temperature: 0 },
//!   (text, id) => console.log(id, text));
//! model.dispose();
//! ```
//!
//! Sources ([`load::load_model`]): the id of a complete model in OPFS (read through sync access
//! handles in a dedicated worker, through `File.slice().arrayBuffer()` per tensor elsewhere),
//! or a GGUF `File`/`Blob`/`ArrayBuffer` (read a tensor at a time). Downloads from a URL go
//! through `opfs_download` first (the JS side does that), so every URL load ends up here.
//!
//! One generation runs at a time: a call while one runs rejects with code `Busy`, and the
//! model's state is untouched. Errors are JS `Error`s with a stable `code` (see
//! `errors.rs`; the package's codes are `WebGPUNotAvailable`, `ContextLengthExceeded`,
//! `Busy`, `InvalidArgument`, `UnsupportedModel`, `AbortError`, `DeviceLost`, ...).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use web_sys::AbortSignal;

use super::errors::WebError;
use super::source::{as_blob, BlobModel};
use super::{has_webgpu, install_panic_hook, to_js};
use crate::backend::gpu::GpuBackend;
use crate::backend::Backend;
use crate::engine::{Engine, FinishReason, GenerateOptions, TokenControl};
use crate::gpu::{DeviceOptions, GpuContext};
use crate::model::ModelConfig;
use crate::sampling::SamplerConfig;
use crate::session::{OpenOptions, Session};
use crate::storage::opfs::OpfsStore;
use crate::text::{encode_chat, ChatTemplate, StopStream, Tokenizer};

mod adapter;
mod diagnose;
mod load;
mod options;

use options::{get, parse_json, parse_messages, read_load_options, GenOptions, LoadOptions};

/// Tokens per prefill pass.
const BATCH: usize = 64;

/// `WebGPUNotAvailable`, with what to do about it.
pub(crate) fn no_webgpu() -> WebError {
    WebError::new(
        "WebGPUNotAvailable",
        "WebGPU is not available here (navigator.gpu is missing or gives no adapter): use a \
         browser with WebGPU enabled (headless Chromium on Linux needs --enable-unsafe-webgpu) \
         and serve the page from a secure context (https, localhost or 127.0.0.1)",
    )
}

fn busy() -> WebError {
    WebError::new(
        "Busy",
        "this model is already generating: wait for that call to end (or abort it) first",
    )
}

fn disposed() -> WebError {
    WebError::new("InvalidArgument", "this model was disposed")
}

/// The package's codes for errors of loading and running.
fn model_error(e: crate::Error) -> WebError {
    let w = WebError::from(e);
    match w.code {
        "NoWebGPU" => WebError::new("WebGPUNotAvailable", w.message),
        "ModelError" => WebError::new("UnsupportedModel", w.message),
        "BadArgument" => WebError::new("InvalidArgument", w.message),
        _ => w,
    }
}

/// What the page gets as `modelInfo`.
#[derive(Serialize, Clone)]
#[serde(rename_all = "camelCase")]
struct ModelInfo {
    name: String,
    architecture: String,
    n_vocab: usize,
    n_layers: usize,
    dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    /// The context the model was trained for.
    trained_context_length: usize,
    /// The KV cache's positions.
    context_length: usize,
    /// Bytes of the model's files.
    file_bytes: u64,
    /// Bytes of GPU memory held (weights, activations, cache).
    gpu_bytes: u64,
    chat_template: String,
    bos_token_id: Option<u32>,
    eos_token_id: Option<u32>,
    stop_token_ids: Vec<u32>,
    /// How the weights were read: `sync-access-handle`, `blob`.
    load_path: &'static str,
}

/// What the page gets as `deviceInfo`.
#[derive(Serialize, Clone)]
#[serde(rename_all = "camelCase")]
struct DeviceInfo {
    adapter: String,
    backend: String,
    device_type: String,
    driver: String,
    shader_f16: bool,
}

/// Counters for `stats()`.
#[derive(Serialize, Clone, Default)]
#[serde(rename_all = "camelCase")]
struct Stats {
    generations: u64,
    prompt_tokens: u64,
    cached_tokens: u64,
    completion_tokens: u64,
    /// Tokens the KV cache holds now.
    kv_tokens: usize,
    load_ms: f64,
    last: Option<Timings>,
}

#[derive(Serialize, Clone, Default)]
#[serde(rename_all = "camelCase")]
struct Timings {
    ttft_ms: f64,
    prefill_ms: f64,
    decode_ms: f64,
    total_ms: f64,
    prefill_tokens_per_second: f64,
    decode_tokens_per_second: f64,
}

struct State {
    engine: RefCell<Option<Engine<GpuBackend>>>,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    info: ModelInfo,
    device: DeviceInfo,
    busy: Cell<bool>,
    /// `dispose()` was called while a generation ran: free everything when it ends.
    dispose_pending: Cell<bool>,
    /// Everything was freed.
    disposed: Cell<bool>,
    stats: RefCell<Stats>,
}

impl State {
    fn destroy(&self) {
        self.disposed.set(true);
        if let Some(mut engine) = self.engine.borrow_mut().take() {
            engine.model.backend.destroy();
        }
    }

    /// `DeviceLost` when the model's GPU device is gone (the browser reset the GPU, the
    /// device's owner destroyed it, memory ran out): nothing runs on it any more.
    fn device_lost(&self) -> Option<WebError> {
        let engine = self.engine.try_borrow().ok()?;
        let reason = engine.as_ref()?.model.backend.ctx.lost()?;
        Some(WebError::new(
            "DeviceLost",
            format!("the GPU device was lost ({reason}): dispose() this model and load it again"),
        ))
    }

    /// The package's error for a failed pass: `DeviceLost` when that is why it failed. The
    /// device's `lost` promise may settle just after the failed readback that revealed it,
    /// so the event loop gets one turn first.
    async fn gpu_error(&self, e: crate::Error) -> WebError {
        if self.device_lost().is_none() {
            crate::web::sleep(std::time::Duration::ZERO).await;
        }
        self.device_lost().unwrap_or_else(|| model_error(e))
    }
}

/// A model on this context's WebGPU device.
#[wasm_bindgen]
pub struct WasmModel {
    state: Rc<State>,
}

/// Sends `{ phase, loaded, total, fraction, message }` load events.
#[derive(Clone)]
struct Progress(Option<Function>);

impl Progress {
    fn send(&self, phase: &str, loaded: f64, total: f64, message: &str) {
        let Some(f) = &self.0 else {
            return;
        };
        let o = js_sys::Object::new();
        let set = |k: &str, v: JsValue| {
            let _ = Reflect::set(&o, &k.into(), &v);
        };
        set("phase", phase.into());
        set("loaded", loaded.into());
        set("total", total.into());
        set(
            "fraction",
            if total > 0.0 {
                (loaded / total).min(1.0)
            } else {
                1.0
            }
            .into(),
        );
        set("message", message.into());
        if let Err(e) = f.call1(&JsValue::NULL, &o) {
            web_sys::console::error_2(&"tritium: onProgress threw".into(), &e);
        }
    }
}

fn aborted_load() -> WebError {
    WebError::new("AbortError", "the load was aborted")
}

/// What [`WasmModel::generate`] resolves to.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    text: String,
    /// Text released at the end (held back for a possible stop string or a partial
    /// character); already part of `text`, not yet passed to `onToken`.
    tail: String,
    token_ids: Vec<u32>,
    prompt_token_ids: Vec<u32>,
    finish_reason: &'static str,
    usage: UsageReport,
    timings: Timings,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageReport {
    prompt_tokens: usize,
    completion_tokens: usize,
    cached_tokens: usize,
    total_tokens: usize,
}

#[wasm_bindgen]
impl WasmModel {
    /// `modelInfo`: architecture, sizes, context, chat template, stop ids.
    #[wasm_bindgen(js_name = modelInfo)]
    pub fn model_info(&self) -> Result<JsValue, JsValue> {
        to_js(&self.state.info)
    }

    /// `deviceInfo`: the WebGPU adapter.
    #[wasm_bindgen(js_name = deviceInfo)]
    pub fn device_info(&self) -> Result<JsValue, JsValue> {
        to_js(&self.state.device)
    }

    /// Counters and the last generation's timings.
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        to_js(&*self.state.stats.borrow())
    }

    /// True while a generation runs.
    #[wasm_bindgen(getter)]
    pub fn busy(&self) -> bool {
        self.state.busy.get()
    }

    /// Token ids of `text` (`addSpecial`: BOS as the tokenizer says).
    pub fn tokenize(&self, text: &str, add_special: bool) -> Result<Vec<u32>, JsValue> {
        Ok(self
            .state
            .tokenizer
            .encode(text, add_special)
            .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?)
    }

    /// The text of `ids`, decoded at once (so multi-byte characters split over tokens come
    /// out whole); special tokens left out when `skip_special`.
    pub fn detokenize(&self, ids: Vec<u32>, skip_special: bool) -> Result<String, JsValue> {
        Ok(self
            .state
            .tokenizer
            .decode(&ids, skip_special)
            .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?)
    }

    /// The text of `ids` as a token-by-token stream produces it ([`crate::text::TextStream`]):
    /// the pieces, one per id (a partial character gives "" until it completes).
    #[wasm_bindgen(js_name = streamPieces)]
    pub fn stream_pieces(&self, ids: Vec<u32>) -> Result<Vec<String>, JsValue> {
        let mut stream = crate::text::TextStream::new(true);
        let mut out = Vec::with_capacity(ids.len() + 1);
        for id in ids {
            out.push(
                stream
                    .push(&self.state.tokenizer, id)
                    .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?,
            );
        }
        out.push(stream.finish());
        Ok(out)
    }

    /// The chat `messages` (`[{ role, content }]`) rendered with the model's template, with
    /// the assistant prefix when `add_generation_prompt`.
    #[wasm_bindgen(js_name = applyChatTemplate)]
    pub fn apply_chat_template(
        &self,
        messages: JsValue,
        add_generation_prompt: bool,
    ) -> Result<String, JsValue> {
        let messages = parse_messages(&messages)?;
        Ok(self
            .state
            .template
            .render(&messages, add_generation_prompt)
            .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?)
    }

    /// Forget the KV cache (the next prompt is computed from its start). `Busy` while a
    /// generation runs.
    #[wasm_bindgen(js_name = resetChat)]
    pub fn reset_chat(&self) -> Result<(), JsValue> {
        if self.state.busy.get() {
            return Err(busy().into());
        }
        if let Some(e) = self.state.engine.borrow_mut().as_mut() {
            e.reset();
        }
        self.state.stats.borrow_mut().kv_tokens = 0;
        Ok(())
    }

    /// Free every GPU buffer (and the device). A generation in progress stops at its next
    /// token and frees them when it ends. The model cannot be used afterwards.
    pub fn dispose(&self) {
        if self.state.busy.get() {
            self.state.dispose_pending.set(true);
        } else {
            self.state.destroy();
        }
    }

    /// True once disposed.
    #[wasm_bindgen(getter)]
    pub fn disposed(&self) -> bool {
        self.state.disposed.get() || self.state.dispose_pending.get()
    }

    /// Generate from `input`: a string (raw text: BOS as the tokenizer says, no chat
    /// template), an array of chat messages `[{ role, content }]` (rendered with the model's
    /// template and the assistant prefix), or `{ ids: [...] }`. `options`: `maxTokens`
    /// (default 256), `temperature` (0 = greedy; default 0.8), `topK`, `topP`, `minP`,
    /// `repeatPenalty`, `repeatLastN`, `frequencyPenalty`, `presencePenalty` (OpenAI's, over the
    /// generated tokens), `seed`, `stop` (string or strings, not part of the
    /// text), `ignoreEos`, `signal` (an `AbortSignal`, checked between tokens: finish reason
    /// `abort`). `on_token(text, id)` is called for each generated token with the text it
    /// completes (UTF-8 safe; "" while a character or a possible stop string is held back).
    /// Resolves to `{ text, tail, tokenIds, promptTokenIds, finishReason, usage: {
    /// promptTokens, completionTokens, cachedTokens, totalTokens }, timings: { ttftMs,
    /// prefillMs, decodeMs, totalMs, prefillTokensPerSecond, decodeTokensPerSecond } }`.
    /// Rejects with `Busy` while another generation runs, `ContextLengthExceeded` when the
    /// prompt leaves no room in the context, `InvalidArgument`, `AbortError` (the signal had
    /// aborted before the start).
    pub fn generate(
        &self,
        input: JsValue,
        options: JsValue,
        on_token: Option<Function>,
    ) -> Promise {
        exclusive(&self.state, move |state| async move {
            run_generate(&state, &input, &options, on_token).await
        })
    }

    /// Load a LoRA adapter for this model: `source` is the id of an adapter in OPFS (a GGUF
    /// adapter or an RDRR adapter folder, downloaded and verified as models are) or a GGUF
    /// adapter's bytes (`File`, `Blob`, `ArrayBuffer`, typed array); `name` names it in
    /// errors. Resolves to its index, which a generation's `adapters` option names. Rejects
    /// with `InvalidArgument` when the adapter does not fit this model (another architecture,
    /// other shapes), `Busy` while a generation runs.
    #[wasm_bindgen(js_name = loadAdapter)]
    pub fn load_adapter(&self, source: JsValue, name: String) -> Promise {
        exclusive(&self.state, move |state| async move {
            let id = adapter::load(&state, &source, &name).await?;
            Ok(JsValue::from(id as u32))
        })
    }

    /// Statistics of one forward pass over `text` (default: a short sentence), stage by
    /// stage: the embedding, the residual stream after each block, the final norm's input
    /// and the logits, each with `{ stage, count, min, max, mean, rms, nan, inf }`. Clears the
    /// KV cache. `Busy` while a generation runs.
    pub fn diagnose(&self, text: Option<String>) -> Promise {
        exclusive(&self.state, move |state| async move {
            diagnose::run(&state, text.as_deref()).await
        })
    }
}

/// Run `job` as the model's one job at a time: `Busy` while another runs, `InvalidArgument`
/// once disposed, `DeviceLost` when the device is gone; a `dispose()` that came while it ran
/// frees everything when it ends.
fn exclusive<F, Fut>(state: &Rc<State>, job: F) -> Promise
where
    F: FnOnce(Rc<State>) -> Fut + 'static,
    Fut: std::future::Future<Output = Result<JsValue, WebError>> + 'static,
{
    let state = state.clone();
    future_to_promise(async move {
        if state.busy.get() {
            return Err(busy().into());
        }
        if state.disposed.get() || state.dispose_pending.get() {
            return Err(disposed().into());
        }
        if let Some(e) = state.device_lost() {
            return Err(e.into());
        }
        state.busy.set(true);
        let result = job(state.clone()).await;
        state.busy.set(false);
        if state.dispose_pending.get() {
            state.destroy();
        }
        result.map_err(JsValue::from)
    })
}

fn encode_input(state: &State, input: &JsValue, o: &GenOptions) -> Result<Vec<u32>, WebError> {
    let bad = |e: crate::text::TextError| WebError::new("InvalidArgument", e.to_string());
    if let Some(text) = input.as_string() {
        return state.tokenizer.encode(&text, true).map_err(bad);
    }
    if js_sys::Array::is_array(input) {
        let messages = parse_messages(input)?;
        let rendered = state
            .template
            .render(&messages, !o.continue_final_message)
            .map_err(bad)?;
        return encode_chat(&state.tokenizer, &rendered).map_err(bad);
    }
    if let Some(ids) = get(input, "ids") {
        let ids: Vec<u32> = parse_json::<Option<Vec<u32>>>(&ids, "ids")?
            .ok_or_else(|| WebError::new("InvalidArgument", "ids must be an array"))?;
        return Ok(ids);
    }
    Err(WebError::new(
        "InvalidArgument",
        "the input must be a string, an array of chat messages, or { ids }",
    ))
}

// The engine's `RefCell` stays borrowed across the GPU waits: `State::busy` (set by the caller)
// keeps every other borrower out until this returns (they check it first, or only read
// `stats`).
#[allow(clippy::await_holding_refcell_ref)]
async fn run_generate(
    state: &State,
    input: &JsValue,
    options: &JsValue,
    on_token: Option<Function>,
) -> Result<JsValue, WebError> {
    let o: GenOptions = parse_json(options, "options")?;
    let signal: Option<AbortSignal> = get(options, "signal")
        .map(|v| {
            v.dyn_into()
                .map_err(|_| WebError::new("InvalidArgument", "signal must be an AbortSignal"))
        })
        .transpose()?;
    if signal.as_ref().is_some_and(AbortSignal::aborted) {
        return Err(WebError::new(
            "AbortError",
            "the request was aborted before it began",
        ));
    }
    let sampling = o.sampler()?;
    let prompt = encode_input(state, input, &o)?;
    let ctx = state.info.context_length;
    if prompt.is_empty() {
        return Err(WebError::new("InvalidArgument", "the prompt is empty"));
    }
    if let Some(&bad) = prompt.iter().find(|&&id| id as usize >= state.info.n_vocab) {
        return Err(WebError::new(
            "InvalidArgument",
            format!("token id {bad} is outside the vocabulary"),
        ));
    }
    if prompt.len() >= ctx {
        return Err(WebError::new(
            "ContextLengthExceeded",
            format!(
                "the prompt has {} tokens and the context holds {ctx}: no room to generate \
                 (load with a larger contextLength, or shorten the conversation)",
                prompt.len()
            ),
        ));
    }
    let opts = GenerateOptions {
        max_tokens: o.max_tokens.unwrap_or(256),
        sampling,
        stop_ids: if o.ignore_eos {
            Vec::new()
        } else {
            state.tokenizer.stop_ids().to_vec()
        },
    };
    let stops = o.stops();
    let mut detok = StopStream::new(&stops);
    let mut failure: Option<WebError> = None;
    let mut aborted = false;
    let start = js_sys::Date::now();
    let generation = {
        let mut guard = state.engine.borrow_mut();
        let engine = guard.as_mut().ok_or_else(disposed)?;
        let active: Vec<_> = o
            .adapters
            .iter()
            .map(|a| (crate::model::AdapterId(a.id), a.scale.unwrap_or(1.0)))
            .collect();
        engine
            .set_adapters(&active)
            .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?;
        let result = engine
            .generate(&prompt, &opts, |id| {
                let (text, stop) = match detok.push(&state.tokenizer, id) {
                    Ok(v) => v,
                    Err(e) => {
                        failure = Some(WebError::new("UnsupportedModel", e.to_string()));
                        return TokenControl::Cancel;
                    }
                };
                if let Some(f) = &on_token {
                    if let Err(e) = f.call2(&JsValue::NULL, &text.into(), &id.into()) {
                        failure = Some(WebError::new(
                            "InvalidArgument",
                            format!("onToken threw: {}", crate::storage::opfs::error_text(&e)),
                        ));
                        return TokenControl::Cancel;
                    }
                }
                if stop {
                    TokenControl::Stop
                } else if signal.as_ref().is_some_and(AbortSignal::aborted)
                    || state.dispose_pending.get()
                {
                    aborted = true;
                    TokenControl::Cancel
                } else {
                    TokenControl::Continue
                }
            })
            .await;
        if result.is_err() {
            // A failed pass leaves the cache in an unknown state.
            engine.reset();
        }
        match result {
            Ok(g) => g,
            Err(e) => {
                drop(guard);
                return Err(state.gpu_error(e).await);
            }
        }
    };
    if let Some(e) = failure {
        return Err(e);
    }
    let tail = detok.finish();
    let u = &generation.usage;
    let finish_reason = match generation.finish_reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled if aborted => "abort",
        FinishReason::Cancelled => "stop",
    };
    let timings = Timings {
        ttft_ms: u.time_to_first_token_ms,
        prefill_ms: u.prefill_ms,
        decode_ms: u.decode_ms,
        total_ms: js_sys::Date::now() - start,
        prefill_tokens_per_second: u.prefill_tokens_per_s,
        decode_tokens_per_second: u.decode_tokens_per_s,
    };
    {
        let mut s = state.stats.borrow_mut();
        s.generations += 1;
        s.prompt_tokens += u.prompt_tokens as u64;
        s.cached_tokens += u.cached_tokens as u64;
        s.completion_tokens += u.generated_tokens as u64;
        s.kv_tokens = u.prompt_tokens + u.generated_tokens;
        s.last = Some(timings.clone());
    }
    to_js(&Report {
        text: detok.text.clone(),
        tail,
        token_ids: generation.ids.clone(),
        prompt_token_ids: generation.prompt_ids.clone(),
        finish_reason,
        usage: UsageReport {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.generated_tokens,
            cached_tokens: u.cached_tokens,
            total_tokens: u.prompt_tokens + u.generated_tokens,
        },
        timings,
    })
    .map_err(|_| WebError::new("InvalidArgument", "the report could not be serialized"))
}

/// The name a download of `url` is stored under in OPFS (what `opfs_download` uses when no
/// `name` is given), or `null`.
#[wasm_bindgen]
pub fn model_name_for_url(url: &str) -> Option<String> {
    crate::storage::model_name_from_url(url)
}
