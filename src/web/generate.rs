//! Greedy generation in the browser from a GGUF held in memory: the end-to-end check that the
//! WebGPU path gives the same tokens as the native one. (The npm package's `BitNet` class, with
//! OPFS streaming instead of a whole file in wasm memory, builds on this.)

use wasm_bindgen::prelude::*;

use super::{has_webgpu, install_panic_hook, js_error, to_js};
use crate::backend::gpu::GpuBackend;
use crate::engine::{Engine, GenerateOptions, Generation, TokenControl};
use crate::formats::gguf::GgufFile;
use crate::gpu::{DeviceOptions, GpuContext};
use crate::model::{GgufTensors, Model, ModelConfig};
use crate::sampling::SamplerConfig;
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
}

fn fail(e: impl std::fmt::Display) -> JsValue {
    js_error("generate", &e.to_string())
}

/// Load the GGUF in `model` onto this browser's WebGPU device and generate greedily from the
/// raw-text `prompt` (BOS as the tokenizer says) for at most `max_tokens` tokens. Resolves to
/// `{ adapter, prompt_ids, generated_ids, text, load_ms, prefill_ms, decode_ms }`.
#[wasm_bindgen]
pub async fn generate_greedy(
    model: js_sys::Uint8Array,
    prompt: String,
    max_tokens: u32,
    ctx_tokens: u32,
) -> Result<JsValue, JsValue> {
    install_panic_hook();
    if !has_webgpu() {
        return Err(js_error("no_webgpu", "WebGPU is not available here"));
    }
    let start = js_sys::Date::now();
    let bytes = model.to_vec();
    let file = GgufFile::read(&bytes).map_err(fail)?;
    let config = ModelConfig::from_gguf(&file).map_err(fail)?;
    let tokenizer = Tokenizer::from_gguf(&file).map_err(fail)?;
    let prompt_ids = tokenizer.encode(&prompt, true).map_err(fail)?;
    let ctx = GpuContext::new(&DeviceOptions::default())
        .await
        .map_err(fail)?;
    let adapter = format!("{} ({})", ctx.adapter.name, ctx.adapter.backend);
    let backend = GpuBackend::new(ctx, 64).map_err(fail)?;
    let tensors = GgufTensors {
        file: &file,
        src: &bytes,
    };
    let model = Model::load(backend, config, &tensors, ctx_tokens as usize).map_err(fail)?;
    drop(bytes);
    let load_ms = js_sys::Date::now() - start;
    let (g, text) = greedy_text(model, &tokenizer, &prompt_ids, max_tokens)
        .await
        .map_err(fail)?;
    to_js(&GenerateReport {
        adapter,
        prompt_ids: g.prompt_ids,
        generated_ids: g.ids,
        text,
        load_ms,
        prefill_ms: g.usage.prefill_ms,
        decode_ms: g.usage.decode_ms,
    })
}

/// Greedy generation from `prompt_ids` for at most `max_tokens` tokens, stopping at the
/// tokenizer's stop ids: the generation and its text (decoded UTF-8-safe as it streams).
pub(super) async fn greedy_text(
    model: Model<GpuBackend>,
    tokenizer: &Tokenizer,
    prompt_ids: &[u32],
    max_tokens: u32,
) -> Result<(Generation, String), crate::Error> {
    let mut engine = Engine::new(model);
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
