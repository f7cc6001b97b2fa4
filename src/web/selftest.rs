//! The GPU kernel self-test in the browser, for the test harness (feature `web-tests`): the
//! same suite that runs natively on lavapipe, on the browser's WebGPU (Tint, not naga,
//! compiles the WGSL there).

use std::sync::{Arc, Mutex};

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;

use super::{has_webgpu, install_panic_hook, js_error, to_js};
use crate::gpu::selftest::{self, CheckResult, Stats};
use crate::gpu::{AdapterSummary, DeviceOptions, GpuContext, GpuError};

/// What `gpu_selftest` resolves to: the adapter as the browser reports it, and one result per
/// check in the order they ran.
#[derive(serde::Serialize)]
struct SelftestReport {
    adapter: AdapterSummary,
    results: Vec<TimedResult>,
}

/// A [`CheckResult`] with how long the check took (SwiftShader is slow; this shows where).
#[derive(serde::Serialize)]
struct TimedResult {
    #[serde(flatten)]
    result: CheckResult,
    ms: f64,
}

/// Run the GPU kernel self-tests whose name starts with `prefix` ("" for all) on this
/// browser's WebGPU adapter. Resolves to `{ adapter, results: [{ name, passed, stats, error,
/// ms }] }`; `on_result`, when given, is called with each result as soon as its check ends.
/// Rejects with an `Error` (`code` "no_webgpu", "no_adapter" or "gpu") when there is no usable
/// WebGPU device.
#[wasm_bindgen]
pub async fn gpu_selftest(prefix: String, on_result: Option<Function>) -> Result<JsValue, JsValue> {
    install_panic_hook();
    if !has_webgpu() {
        return Err(js_error(
            "no_webgpu",
            "WebGPU is not available here (navigator.gpu is missing): use a browser with WebGPU \
             enabled (headless Chromium on Linux needs --enable-unsafe-webgpu) and serve the page \
             from a secure context (https, localhost or 127.0.0.1)",
        ));
    }
    let ctx = GpuContext::new(&DeviceOptions::default())
        .await
        .map_err(|e| match e {
            GpuError::NoAdapter(_) => js_error("no_adapter", &e.to_string()),
            e => js_error("gpu", &e.to_string()),
        })?;

    // Validation errors outside an error scope (a dispatch with a pipeline the browser
    // rejected, say) arrive as events; charge them to the check that was running.
    let uncaptured: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = uncaptured.clone();
    ctx.device
        .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.to_string());
        }));

    let mut results = Vec::new();
    for check in selftest::all_checks()
        .iter()
        .filter(|c| c.name.starts_with(&prefix))
    {
        let start = js_sys::Date::now();
        let outcome = check.run(&ctx).await;
        // Error events are tasks: let the ones this check caused arrive before judging it.
        next_task().await;
        let errors = std::mem::take(&mut *uncaptured.lock().unwrap_or_else(|p| p.into_inner()));
        let result = match (outcome, errors.is_empty()) {
            (Ok(stats), true) => CheckResult {
                name: check.name.into(),
                passed: true,
                stats,
                error: None,
            },
            (outcome, _) => {
                let mut message: Vec<String> = outcome.err().into_iter().collect();
                message.extend(errors.into_iter().map(|e| format!("WebGPU error: {e}")));
                CheckResult {
                    name: check.name.into(),
                    passed: false,
                    stats: Stats::default(),
                    error: Some(message.join("\n")),
                }
            }
        };
        let timed = TimedResult {
            result,
            ms: js_sys::Date::now() - start,
        };
        if let Some(f) = &on_result {
            f.call1(&JsValue::NULL, &to_js(&timed)?)?;
        }
        results.push(timed);
    }
    to_js(&SelftestReport {
        adapter: ctx.adapter.clone(),
        results,
    })
}

/// Resolves on the next macrotask (`setTimeout(0)`), after pending events have been delivered.
async fn next_task() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let global = js_sys::global();
        if let Ok(set_timeout) = Reflect::get(&global, &"setTimeout".into()) {
            if let Ok(set_timeout) = set_timeout.dyn_into::<Function>() {
                if set_timeout.call2(&global, &resolve, &0.into()).is_ok() {
                    return;
                }
            }
        }
        let _ = resolve.call0(&JsValue::NULL);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}
