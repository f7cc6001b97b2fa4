//! Greedy generation in the browser, for the test harness (feature `web-tests`): from a GGUF
//! held in memory (the end-to-end check that the WebGPU path gives the same tokens as the
//! native one) and from a model in OPFS loaded tensor by tensor (wasm memory measured at each
//! step). The npm package's `BitNet` class does the same through `load_model`.

use wasm_bindgen::prelude::*;

use super::cached::{open_files, wasm_memory_bytes};
use super::errors::WebError;
use super::{has_webgpu, install_panic_hook, js_error, to_js};
use crate::backend::gpu::GpuBackend;
use crate::engine::{Engine, GenerateOptions, Generation, TokenControl};
use crate::formats::source::MemoryFiles;
use crate::gpu::{DeviceOptions, GpuContext};
use crate::sampling::SamplerConfig;
use crate::session::{ModelMeta, OpenOptions, OpenedModel, Session, WithTokenizer};
use crate::storage::opfs::{OpfsFiles, OpfsStore};
use crate::text::{TextStream, Tokenizer};

#[derive(serde::Serialize)]
struct GenerateReport {
    adapter: String,
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
    text: String,
    load_ms: f64,
    prefill_ms: f64,
    decode_ms: f64,
    /// With `profile`: GPU time per op label over the decode passes (timestamp queries), and
    /// the host's time per pass (recording, submitting, waiting for the readback).
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Vec<(String, crate::backend::profile::OpTime)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_ms_per_pass: Option<[f64; 3]>,
}

fn fail(e: impl std::fmt::Display) -> JsValue {
    js_error("generate", &e.to_string())
}

/// A KV cache of `ctx_tokens` positions (at most the model's trained context), with exact
/// arithmetic where asked.
fn options(ctx_tokens: u32, exact: bool) -> OpenOptions {
    OpenOptions {
        context: Some(ctx_tokens as usize),
        arithmetic: match exact {
            true => crate::session::Arithmetic::Exact,
            false => crate::session::Arithmetic::Fast,
        },
        ..OpenOptions::default()
    }
}

/// Load the GGUF in `model` onto this browser's WebGPU device and generate greedily from the
/// raw-text `prompt` (BOS as the tokenizer says) for at most `max_tokens` tokens. Resolves to
/// `{ adapter, prompt_ids, generated_ids, text, load_ms, prefill_ms, decode_ms }`. With
/// `profile` (where the device has timestamp queries), the same prompt is then decoded once
/// more with every op timed: `profile` lists `[label, { calls, seconds }]` over those passes
/// (the prompt's last token and the decoded ones) and `host_ms_per_pass` the host's record,
/// submit and wait times per pass of that run. `exact`: exact arithmetic
/// ([`crate::session::Arithmetic::Exact`]).
#[wasm_bindgen]
pub async fn generate_greedy(
    model: js_sys::Uint8Array,
    prompt: String,
    max_tokens: u32,
    ctx_tokens: u32,
    profile: Option<bool>,
    exact: Option<bool>,
) -> Result<JsValue, JsValue> {
    install_panic_hook();
    if !has_webgpu() {
        return Err(js_error("no_webgpu", "WebGPU is not available here"));
    }
    let start = js_sys::Date::now();
    let mut files = MemoryFiles::new();
    files.insert("model.gguf", model.to_vec());
    let opened = OpenedModel::gguf(files, "model.gguf").map_err(fail)?;
    let ctx = GpuContext::new(&DeviceOptions::default())
        .await
        .map_err(fail)?;
    let adapter = format!("{} ({})", ctx.adapter.name, ctx.adapter.backend);
    let backend = GpuBackend::new(ctx, 64).map_err(fail)?;
    let session = crate::session::load(&opened, backend, &options(ctx_tokens, exact == Some(true)))
        .map_err(fail)?;
    drop(opened);
    let tokenizer = session
        .tokenizer
        .ok_or_else(|| fail("the model has no tokenizer"))?;
    let prompt_ids = tokenizer.encode(&prompt, true).map_err(fail)?;
    let load_ms = js_sys::Date::now() - start;
    let mut engine = session.engine;
    let (g, text) = greedy_text(&mut engine, &tokenizer, &prompt_ids, max_tokens)
        .await
        .map_err(fail)?;
    let (mut profile_rows, mut host_ms_per_pass) = (None, None);
    if profile == Some(true) && engine.model.backend.enable_profile() {
        // The prompt is cached now: this run is one pass for its last token, then the decode.
        let before = engine.model.backend.timings();
        greedy_text(&mut engine, &tokenizer, &prompt_ids, max_tokens)
            .await
            .map_err(fail)?;
        let after = engine.model.backend.timings();
        let passes = (after.passes - before.passes).max(1) as f64;
        let per_pass = |a: f64, b: f64| (a - b) / passes * 1e3;
        host_ms_per_pass = Some([
            per_pass(after.record_s, before.record_s),
            per_pass(after.submit_s, before.submit_s),
            per_pass(after.wait_s, before.wait_s),
        ]);
        profile_rows = engine.model.backend.profile();
    }
    to_js(&GenerateReport {
        adapter,
        prompt_ids: g.prompt_ids,
        generated_ids: g.ids,
        text,
        load_ms,
        prefill_ms: g.usage.prefill_ms,
        decode_ms: g.usage.decode_ms,
        profile: profile_rows,
        host_ms_per_pass,
    })
}

/// Greedy generation from `prompt_ids` for at most `max_tokens` tokens, stopping at the
/// tokenizer's stop ids: the generation and its text (decoded UTF-8-safe as it streams).
pub(super) async fn greedy_text(
    engine: &mut Engine<GpuBackend>,
    tokenizer: &Tokenizer,
    prompt_ids: &[u32],
    max_tokens: u32,
) -> Result<(Generation, String), crate::Error> {
    let opts = GenerateOptions {
        max_tokens: max_tokens as usize,
        sampling: SamplerConfig::greedy(),
        stop_ids: tokenizer.stop_ids().to_vec(),
    };
    let mut stream = TextStream::new(true);
    let mut text = String::new();
    let g = engine
        .generate(prompt_ids, &opts, |id| {
            if let Ok(piece) = stream.push(tokenizer, id) {
                text.push_str(&piece);
            }
            TokenControl::Continue
        })
        .await?;
    text.push_str(&stream.finish());
    Ok((g, text))
}

#[derive(serde::Serialize)]
struct CachedReport {
    adapter: String,
    prompt_ids: Vec<u32>,
    generated_ids: Vec<u32>,
    text: String,
    /// Bytes of the model's files in OPFS.
    model_bytes: u64,
    /// wasm memory before the model was opened, after its metadata and tokenizer were read,
    /// after its weights were loaded onto the GPU, and after generating.
    wasm_memory_before: f64,
    wasm_memory_after_open: f64,
    wasm_memory_after_load: f64,
    wasm_memory_after_generate: f64,
    load_ms: f64,
    prefill_ms: f64,
    decode_ms: f64,
}

/// Load the complete model `name` from OPFS onto this worker's WebGPU device, tensor by
/// tensor, and generate greedily from the raw-text `prompt` (BOS as the tokenizer says) for at
/// most `max_tokens` tokens with a KV cache of `ctx_tokens` positions. Must run in a dedicated
/// worker (`NeedsWorker` otherwise). Resolves to `{ adapter, prompt_ids, generated_ids, text,
/// model_bytes, wasm_memory_before, wasm_memory_after_open, wasm_memory_after_load,
/// wasm_memory_after_generate,
/// load_ms, prefill_ms, decode_ms }`.
#[wasm_bindgen]
pub async fn opfs_generate_greedy(
    name: String,
    prompt: String,
    max_tokens: u32,
    ctx_tokens: u32,
) -> Result<JsValue, JsValue> {
    install_panic_hook();
    if !has_webgpu() {
        return Err(WebError::new("NoWebGPU", "WebGPU is not available here").into());
    }
    let wasm_memory_before = wasm_memory_bytes();
    let start = js_sys::Date::now();
    let store = OpfsStore::open().await.map_err(WebError::from)?;
    let files = OpfsFiles::open(&store, &name)
        .await
        .map_err(WebError::from)?;
    let model_bytes = files.total_bytes();
    let opened = open_files(files).map_err(WebError::from)?;
    let tokenizer = opened.tokenizer().map_err(WebError::from)?;
    let prompt_ids = tokenizer
        .encode(&prompt, true)
        .map_err(|e| WebError::from(crate::Error::from(e)))?;
    let wasm_memory_after_open = wasm_memory_bytes();
    let ctx = GpuContext::new(&DeviceOptions::default())
        .await
        .map_err(WebError::from)?;
    let adapter = format!("{} ({})", ctx.adapter.name, ctx.adapter.backend);
    let backend = GpuBackend::new(ctx, 64).map_err(WebError::from)?;
    // The tokenizer parsed above goes to the session (not parsed again while loading).
    let with_tokenizer = WithTokenizer::new(&opened, tokenizer);
    let session = crate::session::load(&with_tokenizer, backend, &options(ctx_tokens, false))
        .map_err(WebError::from)?;
    drop(with_tokenizer);
    // Close the sync access handles: the weights are on the GPU now.
    drop(opened);
    let wasm_memory_after_load = wasm_memory_bytes();
    let load_ms = js_sys::Date::now() - start;

    let (mut engine, tokenizer) = match session {
        Session {
            engine,
            tokenizer: Some(tokenizer),
            ..
        } => (engine, tokenizer),
        _ => return Err(WebError::new("ModelError", "the model has no tokenizer").into()),
    };
    let (g, text) = greedy_text(&mut engine, &tokenizer, &prompt_ids, max_tokens)
        .await
        .map_err(WebError::from)?;
    to_js(&CachedReport {
        adapter,
        prompt_ids: g.prompt_ids,
        generated_ids: g.ids,
        text,
        model_bytes,
        wasm_memory_before,
        wasm_memory_after_open,
        wasm_memory_after_load,
        wasm_memory_after_generate: wasm_memory_bytes(),
        load_ms,
        prefill_ms: g.usage.prefill_ms,
        decode_ms: g.usage.decode_ms,
    })
}
