//! A model on the caller's own `GPUDevice` (the `device` load option).
//!
//! wgpu makes its devices through `navigator.gpu`, which its web backend reads once, when the
//! instance is made. So for that one synchronous call `navigator.gpu` is shadowed by a
//! stand-in (`js/common.js`, `gpuFor(device)`) whose adapter describes the caller's device
//! (its features, limits and adapter info) and whose `requestDevice()` returns it. Nothing
//! else sees the stand-in: the property is removed again before any other code runs.
//!
//! The context is marked external ([`GpuContext::into_external`]): `dispose()` destroys every
//! buffer the model made and leaves the device working for its owner.

use js_sys::{Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::gpu::{DeviceOptions, GpuContext, GpuError};

/// A context on the device that `gpu` (the stand-in for `navigator.gpu`) hands out.
pub(crate) async fn context_on(gpu: &JsValue) -> Result<GpuContext, GpuError> {
    let fail = |what: &str, e: JsValue| {
        GpuError::RequestDevice(format!("{what}: {}", crate::storage::opfs::error_text(&e)))
    };
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into())
        .map_err(|e| fail("no navigator", e))?;
    let navigator: &Object = navigator
        .dyn_ref()
        .ok_or_else(|| GpuError::RequestDevice("no navigator object here".into()))?;
    let descriptor = Object::new();
    for (key, value) in [
        ("value", gpu.clone()),
        ("configurable", JsValue::TRUE),
        ("writable", JsValue::TRUE),
    ] {
        Reflect::set(&descriptor, &key.into(), &value)
            .map_err(|e| fail("describing the stand-in", e))?;
    }
    Object::define_property(navigator, &"gpu".into(), &descriptor);
    let instance = GpuContext::instance(wgpu::Backends::BROWSER_WEBGPU);
    // The prototype's `gpu` getter again, for everyone else.
    let _ = Reflect::delete_property(navigator, &"gpu".into());
    let ctx = GpuContext::on_instance(&instance, &DeviceOptions::default()).await?;
    Ok(ctx.into_external())
}
