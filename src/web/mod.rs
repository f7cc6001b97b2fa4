//! The browser entry points (wasm-bindgen, WebGPU): the npm package's (`load_model` and its
//! `WasmModel`, the OPFS model store), and with the feature `web-tests` the test harness's (the
//! kernel self-test, greedy generation, hashing speed), which the package leaves out.
//!
//! Errors cross into JS once, here: a JS `Error` with a readable message and a stable `code`.

#[cfg(feature = "web-tests")]
mod bench;
mod bitnet;
mod cached;
mod device;
mod errors;
mod fetch;
#[cfg(feature = "web-tests")]
mod generate;
mod hash;
#[cfg(feature = "web-tests")]
mod selftest;
mod source;
mod store;

pub use fetch::{sleep, FetchBody, FetchClient};

use std::sync::Once;

use js_sys::Reflect;
use wasm_bindgen::prelude::*;

/// Serialize through JSON (no extra dependency; the values are small).
fn to_js<T: serde::Serialize>(value: &T) -> Result<JsValue, JsValue> {
    let text = serde_json::to_string(value).map_err(|e| js_error("internal", &e.to_string()))?;
    js_sys::JSON::parse(&text)
}

/// A JS `Error` with `message` and a stable `code`.
fn js_error(code: &str, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    let _ = Reflect::set(&err, &"code".into(), &code.into());
    err.into()
}

fn has_webgpu() -> bool {
    Reflect::get(&js_sys::global(), &"navigator".into())
        .and_then(|nav| Reflect::get(&nav, &"gpu".into()))
        .is_ok_and(|gpu| !gpu.is_undefined() && !gpu.is_null())
}

/// Send Rust panics to the console with their message (otherwise only "unreachable" shows).
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            web_sys::console::error_1(&format!("tritium panicked: {info}").into());
        }));
    });
}
