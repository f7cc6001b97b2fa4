//! `diagnose()`: statistics of one forward pass, stage by stage. The pass is run once per
//! stage with the blocks after it cut off (the weights stay loaded; only the list of blocks
//! the pass walks is shortened), and the residual stream is read back after each: the
//! embedding (no blocks), after every block, then the logits of the last token. No CPU
//! reference is needed: the numbers show where values blow up or turn NaN.

use serde::Serialize;

use super::{model_error, State};
use crate::backend::{Backend, Batch, Logits, Readback};
use crate::web::errors::WebError;
use crate::web::to_js;
use wasm_bindgen::JsValue;

/// Statistics of one stage's values.
#[derive(Serialize)]
pub(super) struct StageStats {
    stage: String,
    count: usize,
    min: f64,
    max: f64,
    mean: f64,
    rms: f64,
    nan: usize,
    inf: usize,
}

fn stats(stage: String, v: &[f32]) -> StageStats {
    let (mut min, mut max, mut sum, mut sq) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0);
    let (mut nan, mut inf, mut n) = (0, 0, 0usize);
    for &x in v {
        if x.is_nan() {
            nan += 1;
            continue;
        }
        if x.is_infinite() {
            inf += 1;
            continue;
        }
        let x = f64::from(x);
        min = min.min(x);
        max = max.max(x);
        sum += x;
        sq += x * x;
        n += 1;
    }
    let d = n.max(1) as f64;
    StageStats {
        stage,
        count: v.len(),
        min: if n > 0 { min } else { 0.0 },
        max: if n > 0 { max } else { 0.0 },
        mean: sum / d,
        rms: (sq / d).sqrt(),
        nan,
        inf,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Diagnosis {
    tokens: usize,
    stages: Vec<StageStats>,
    /// Stages with a NaN or an infinity.
    non_finite_stages: Vec<String>,
    /// What became of the model's runtime hints (`runtimeOptimizations`): each hint, its
    /// outcome (`applied`, `default`: what runs anyway, `ignored`) and why.
    hints: Vec<crate::session::HintNote>,
    /// The pass as the GPU runs it, one line per step, each product, norm and attention with
    /// the kernel it got (and the hints that chose it), as `tritium run --plan` prints it.
    plan: Vec<String>,
    ms: f64,
}

/// Run the diagnosis over `text` (its first tokens, at most one pass).
// The engine's `RefCell` stays borrowed across the GPU waits: `State::busy` (set by the caller)
// keeps every other borrower out until this returns (they check it first, or only read
// `stats`).
#[allow(clippy::await_holding_refcell_ref)]
pub(super) async fn run(state: &State, text: Option<&str>) -> Result<JsValue, WebError> {
    let start = js_sys::Date::now();
    let text = text.unwrap_or("The quick brown fox jumps over the lazy dog.");
    let mut ids = state
        .tokenizer
        .encode(text, true)
        .map_err(|e| WebError::new("InvalidArgument", e.to_string()))?;
    let mut guard = state.engine.borrow_mut();
    let engine = guard
        .as_mut()
        .ok_or_else(|| WebError::new("InvalidArgument", "this model was disposed"))?;
    let max = engine
        .model
        .backend
        .limits()
        .max_batch
        .min(engine.model.ctx)
        .max(1);
    ids.truncate(max);
    if ids.is_empty() {
        return Err(WebError::new("InvalidArgument", "the text has no tokens"));
    }
    // The cache is overwritten from position 0.
    engine.reset();
    let n = ids.len();
    let dim = engine.model.config.dim;
    let n_layers = engine.model.weights.layers.len();
    let mut stages = Vec::with_capacity(n_layers + 2);
    let x = engine.model.state.x;
    for keep in 0..=n_layers {
        // The first `keep` blocks only: a pass of its own shape, planned afresh.
        let rest = engine.model.weights.layers.split_off(keep);
        engine.model.clear_plans();
        let pass = engine.model.forward(&ids, 0, Readback::Nothing).await;
        engine.model.weights.layers.extend(rest);
        engine.model.clear_plans();
        pass.map_err(model_error)?;
        let values = engine
            .model
            .backend
            .read_activation(x, n * dim)
            .await
            .map_err(model_error)?;
        let name = if keep == 0 {
            "embedding".to_string()
        } else {
            format!("block {}", keep - 1)
        };
        stages.push(stats(name, &values));
    }
    let plan = engine
        .model
        .plan_text(&Batch::one(0, n), Readback::Last)
        .map_err(model_error)?
        .1;
    let logits = engine
        .model
        .forward(&ids, 0, Readback::Last)
        .await
        .map_err(model_error)?;
    engine.reset();
    if let Logits::Full(row) = logits {
        stages.push(stats("logits (last token)".into(), &row));
    }
    let non_finite_stages = stages
        .iter()
        .filter(|s| s.nan > 0 || s.inf > 0)
        .map(|s| s.stage.clone())
        .collect();
    to_js(&Diagnosis {
        tokens: n,
        stages,
        non_finite_stages,
        hints: engine.model.backend.hint_notes().to_vec(),
        plan,
        ms: js_sys::Date::now() - start,
    })
    .map_err(|_| WebError::new("InvalidArgument", "the diagnosis could not be serialized"))
}
