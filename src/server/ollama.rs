//! The Ollama routes: `/api/generate`, `/api/chat` (NDJSON lines by default, one object with
//! `stream: false`), `/api/tags`, `/api/show`, `/api/ps`, `/api/version`, `/api/delete` and
//! `/api/pull`. Shapes as Ollama's API documentation has them; errors as `{"error": "..."}`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::error::{Api, ApiError};
use super::generation::{Budget, Event, GenRequest, Outcome, Prompt};
use super::models::KeepAlive;
use super::openai::{collect, event_stream, json_response, random_seed, started};
use super::request::{json_object, type_name, Fields};
use super::App;
use crate::sampling::SamplerConfig;
use crate::text::ChatMessage;

/// An RFC 3339 UTC timestamp with nanoseconds, as Ollama writes `created_at`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// Ollama's `keep_alive`: a duration (`"5m"`, `"1h30m"`, `"30s"`, `"0"`) or a number of
/// seconds; negative keeps the model loaded until the server stops.
pub fn keep_alive(v: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    let bad = |why: String| ApiError::invalid_param("keep_alive", why);
    let secs = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
        Some(Value::String(s)) => parse_duration(s.trim()).ok_or_else(|| {
            bad(format!(
                "`keep_alive` {s:?} is not a duration (\"5m\", \"1h\", \"30s\", \"-1\")"
            ))
        })?,
        Some(other) => {
            return Err(bad(format!(
                "`keep_alive` must be a duration string or a number of seconds, got {}",
                type_name(other)
            )))
        }
    };
    if secs < 0.0 {
        return Ok(Some(KeepAlive::Forever));
    }
    Ok(Some(KeepAlive::For(
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
    )))
}

/// Go's `time.ParseDuration` subset Ollama clients send (h, m, s, ms units; a bare number is
/// seconds), in seconds.
fn parse_duration(s: &str) -> Option<f64> {
    if let Ok(n) = s.parse::<f64>() {
        return n.is_finite().then_some(n);
    }
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Some(if neg { -total } else { total })
}

/// `options` as sampling settings (Ollama's defaults for what is omitted), a budget, stop
/// strings and the context asked for.
type Options = (SamplerConfig, Budget, Vec<String>, Option<usize>);

fn options(o: Option<&Map<String, Value>>) -> Result<Options, ApiError> {
    let empty = Map::new();
    let f = Fields {
        map: o.unwrap_or(&empty),
        path: "options.",
    };
    let positive = |key: &str, v: Option<f64>, off: f32| -> Result<f32, ApiError> {
        match v {
            Some(x) if x <= 0.0 => Err(ApiError::invalid_param(
                &format!("options.{key}"),
                format!("`options.{key}` must be more than 0, got {x}"),
            )),
            Some(x) => Ok(x as f32),
            None => Ok(off),
        }
    };
    let sampling = SamplerConfig {
        temperature: f
            .number_in("temperature", 0.0, 100.0)?
            .map_or(0.8, |t| t as f32),
        top_k: f
            .integer_min("top_k", 0)?
            .map_or(40, |k| k.min(u32::MAX as i64) as usize),
        top_p: positive("top_p", f.number_in("top_p", 0.0, 1.0)?, 0.9)?,
        min_p: f.number_in("min_p", 0.0, 1.0)?.map_or(0.0, |p| p as f32),
        repeat_penalty: positive("repeat_penalty", f.number("repeat_penalty")?, 1.1)?,
        repeat_last_n: match f.integer("repeat_last_n")? {
            None => 64,
            // -1: the whole context (the history the engine keeps).
            Some(-1) => usize::MAX,
            Some(n) if n < 0 => {
                return Err(ApiError::invalid_param(
                    "options.repeat_last_n",
                    format!("`options.repeat_last_n` must be -1 or more, got {n}"),
                ))
            }
            Some(n) => n as usize,
        },
        frequency_penalty: f.number("frequency_penalty")?.map_or(0.0, |p| p as f32),
        presence_penalty: f.number("presence_penalty")?.map_or(0.0, |p| p as f32),
        seed: match f.integer("seed")? {
            // Ollama's -1 (and no seed): a random one.
            None | Some(-1) => random_seed(),
            Some(s) => s as u64,
        },
    };
    let budget = match f.integer("num_predict")? {
        // -1: no limit, -2: until the context is full; both end at the context here.
        None | Some(-1) | Some(-2) => Budget::Context,
        Some(n) if n < 0 => {
            return Err(ApiError::invalid_param(
                "options.num_predict",
                format!("`options.num_predict` must be -2, -1 or more, got {n}"),
            ))
        }
        Some(n) => Budget::UpTo(n as usize),
    };
    // A model loaded with another context is loaded again with this one (as Ollama does).
    let context = f
        .integer_min("num_ctx", 1)?
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    Ok((sampling, budget, f.strings("stop")?, context))
}

fn ns(ms: f64) -> u64 {
    (ms * 1e6).max(0.0) as u64
}

/// The fields of the last line.
fn done_fields(v: &mut Value, o: &Outcome, reason: &str) {
    v["done"] = true.into();
    v["done_reason"] = reason.into();
    v["total_duration"] = ns(o.total_ms).into();
    v["load_duration"] = ns(o.load_ms).into();
    v["prompt_eval_count"] = o.usage.prompt_tokens.into();
    v["prompt_eval_duration"] = ns(o.usage.prefill_ms).into();
    v["eval_count"] = o.usage.generated_tokens.into();
    v["eval_duration"] = ns(o.usage.decode_ms).into();
}

#[derive(Copy, Clone)]
enum Kind {
    Generate,
    Chat,
}

/// One line's text field.
fn piece(kind: Kind, model: &str, text: &str) -> Value {
    let mut v = json!({ "model": model, "created_at": rfc3339(SystemTime::now()) });
    match kind {
        Kind::Generate => v["response"] = text.into(),
        Kind::Chat => v["message"] = json!({ "role": "assistant", "content": text }),
    }
    v["done"] = false.into();
    v
}

fn ndjson(v: &Value) -> Bytes {
    Bytes::from(format!("{v}\n"))
}

/// Answer a generate or chat request.
async fn answer(
    app: &Arc<App>,
    kind: Kind,
    model: &str,
    prompt: Option<Prompt>,
    map: &Map<String, Value>,
) -> Result<Response, ApiError> {
    let f = Fields::new(map);
    let stream = f.bool("stream")?.unwrap_or(true);
    let keep = keep_alive(map.get("keep_alive"))?;
    let (sampling, budget, stop, context) = options(f.object("options")?)?;
    if f.has("format") {
        return Err(ApiError::invalid_param(
            "format",
            "`format` (structured output) is not supported",
        ));
    }
    if f.array("images")?.is_some_and(|i| !i.is_empty()) {
        return Err(ApiError::invalid_param(
            "images",
            "images are not supported",
        ));
    }
    let Some(prompt) = prompt else {
        // No prompt: load the model (or, with keep_alive 0, unload it) and say so.
        let unload = keep == Some(KeepAlive::For(Duration::ZERO));
        let (name, mut rx) = app.registry.submit(model, None, keep)?;
        let (_, _, outcome) = collect(&mut rx).await?;
        let mut v = piece(kind, &name, "");
        done_fields(&mut v, &outcome, if unload { "unload" } else { "load" });
        return Ok(json_response(StatusCode::OK, &v));
    };
    let request = GenRequest {
        prompt,
        budget,
        sampling,
        stop,
        logprobs: None,
        context,
        lora: None,
    };
    let (name, mut rx) = app.registry.submit(model, Some(request), keep)?;
    started(&mut rx).await?;
    if !stream {
        let (text, _, outcome) = collect(&mut rx).await?;
        let mut v = piece(kind, &name, &text);
        done_fields(&mut v, &outcome, outcome.finish_reason());
        if let Kind::Generate = kind {
            let context: Vec<u32> = outcome
                .prompt_ids
                .iter()
                .chain(&outcome.ids)
                .copied()
                .collect();
            v["context"] = context.into();
        }
        return Ok(json_response(StatusCode::OK, &v));
    }
    Ok(event_stream(
        "application/x-ndjson",
        None,
        rx,
        move |event| match event {
            Some(Event::Text(t, _)) => (ndjson(&piece(kind, &name, &t)), true),
            Some(Event::Started { .. }) => (Bytes::new(), true),
            Some(Event::Done(o)) => {
                let mut v = piece(kind, &name, "");
                done_fields(&mut v, &o, o.finish_reason());
                if let Kind::Generate = kind {
                    let context: Vec<u32> = o.prompt_ids.iter().chain(&o.ids).copied().collect();
                    v["context"] = context.into();
                }
                (ndjson(&v), false)
            }
            Some(Event::Failed(e)) => (ndjson(&e.body(Api::Ollama)), false),
            None => (
                ndjson(
                    &ApiError::internal("the model's thread ended without finishing the stream")
                        .body(Api::Ollama),
                ),
                false,
            ),
        },
    ))
}

/// `model` (or the older `name`).
fn model_field(f: &Fields) -> Result<String, ApiError> {
    match (f.string("model")?, f.string("name")?) {
        (Some(m), _) | (None, Some(m)) => Ok(m.to_string()),
        (None, None) => Err(ApiError::invalid_param("model", "`model` is required")),
    }
}

async fn read(app: &App, body: Body) -> Result<Map<String, Value>, ApiError> {
    json_object(body, app.body_limit).await
}

/// `POST /api/generate`.
pub async fn generate(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let f = Fields::new(&map);
        let model = model_field(&f)?;
        if f.has("suffix") {
            return Err(ApiError::invalid_param(
                "suffix",
                "`suffix` is not supported",
            ));
        }
        if f.has("context") {
            return Err(ApiError::invalid_param(
                "context",
                "`context` is not supported: send the conversation to /api/chat",
            ));
        }
        let prompt = f.string("prompt")?.unwrap_or("");
        let system = f.string("system")?;
        let raw = f.bool("raw")?.unwrap_or(false);
        let prompt = if prompt.is_empty() {
            None
        } else if raw {
            Some(Prompt::Text(prompt.to_string()))
        } else {
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(ChatMessage::new("system", s));
            }
            messages.push(ChatMessage::new("user", prompt));
            Some(Prompt::Chat(messages))
        };
        answer(&app, Kind::Generate, &model, prompt, &map).await
    }
    .await;
    result.unwrap_or_else(|e| e.response(Api::Ollama))
}

/// `POST /api/chat`.
pub async fn chat(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let f = Fields::new(&map);
        let model = model_field(&f)?;
        if f.array("tools")?.is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::invalid_param("tools", "tools are not supported"));
        }
        let prompt = match f.array("messages")? {
            None => None,
            Some(list) if list.is_empty() => None,
            Some(list) => Some(Prompt::Chat(super::openai::messages(Some(list))?)),
        };
        answer(&app, Kind::Chat, &model, prompt, &map).await
    }
    .await;
    result.unwrap_or_else(|e| e.response(Api::Ollama))
}

/// `details` of a model, as Ollama's tags and ps show them.
fn details_json(d: Option<&super::details::ModelDetails>) -> Value {
    match d {
        Some(d) => json!({
            "parent_model": "",
            "format": d.format,
            "family": d.architecture,
            "families": d.architecture.as_ref().map(|a| vec![a.clone()]),
            "parameter_size": d.parameter_size,
            "quantization_level": d.quantization,
        }),
        None => json!({}),
    }
}

/// A model's digest as Ollama lists it: here the SHA-256 of its path and size (a GGUF's
/// own hash would mean reading the whole file).
fn digest(path: &std::path::Path, size: u64) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(path.to_string_lossy().as_bytes());
    h.update(size.to_le_bytes());
    hex::encode(h.finalize())
}

/// `GET /api/tags`.
pub async fn tags(State(app): State<Arc<App>>) -> Response {
    let models = match super::known_models(&app).await {
        Ok(m) => m,
        Err(e) => return e.response(Api::Ollama),
    };
    let list: Vec<Value> = models
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "model": m.name,
                "modified_at": rfc3339(UNIX_EPOCH + Duration::from_secs(m.modified)),
                "size": m.bytes,
                "digest": digest(&m.path, m.bytes),
                "details": details_json(m.details.as_ref()),
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({ "models": list }))
}

/// `GET /api/ps`.
pub async fn ps(State(app): State<Arc<App>>) -> Response {
    let loaded = app.registry.loaded();
    let mut list = Vec::new();
    for l in loaded {
        let path = l.path.clone();
        let details = tokio::task::spawn_blocking(move || super::details::describe(&path).ok())
            .await
            .ok()
            .flatten();
        list.push(json!({
            "name": l.name,
            "model": l.name,
            "size": l.bytes,
            "digest": digest(&l.path, l.bytes),
            "details": details_json(details.as_ref()),
            // Never: Go's zero time would read as expired; a far date says "until stopped".
            "expires_at": rfc3339(l.expires_at.unwrap_or(UNIX_EPOCH + Duration::from_secs(253_402_300_799))),
            "size_vram": if l.backend.starts_with("cpu") || l.backend.is_empty() { 0 } else { l.memory },
            "context_length": l.context,
            "loading": l.loading,
            "queued": l.queued,
            "backend": l.backend,
        }));
    }
    json_response(StatusCode::OK, &json!({ "models": list }))
}

/// `GET /api/version`.
pub async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({ "version": env!("CARGO_PKG_VERSION") }),
    )
}

/// `POST /api/show`.
pub async fn show(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let model = model_field(&Fields::new(&map))?;
        let (name, path) = app.registry.resolve(&model)?;
        let p = path.clone();
        let d = tokio::task::spawn_blocking(move || super::details::describe(&p))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("cannot read the model `{name}`: {e}")))?;
        let mut info = Map::new();
        if let Some(a) = &d.architecture {
            info.insert("general.architecture".into(), a.clone().into());
            for (k, v) in &d.hyper_parameters {
                info.insert(format!("{a}.{k}"), v.clone());
            }
        }
        info.insert("general.parameter_count".into(), d.parameters.into());
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .unwrap_or(UNIX_EPOCH);
        Ok(json_response(
            StatusCode::OK,
            &json!({
                "modelfile": format!("FROM {}\n", path.display()),
                "parameters": "",
                "template": d.template,
                "license": d.license,
                "details": details_json(Some(&d)),
                "model_info": info,
                "capabilities": ["completion"],
                "modified_at": rfc3339(modified),
            }),
        ))
    }
    .await;
    result.unwrap_or_else(|e: ApiError| e.response(Api::Ollama))
}

/// `DELETE /api/delete`: remove a model from the store (unloading it first).
pub async fn delete(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let model = model_field(&Fields::new(&map))?;
        let name = model.strip_suffix(":latest").unwrap_or(&model).to_string();
        if app.registry.named().contains_key(&name) {
            return Err(ApiError::invalid_param(
                "model",
                format!("`{name}` was named when the server started, not pulled into the store; it is not deleted"),
            ));
        }
        crate::storage::check_model_name(&name)
            .map_err(|e| ApiError::model_not_found(&model, e))?;
        let store = app.registry.store()?;
        if store.complete_path(&name).is_none() {
            return Err(ApiError::model_not_found(&model, "not in the model store"));
        }
        app.registry.unload(&name);
        tokio::task::spawn_blocking(move || {
            use crate::storage::ShardStore;
            pollster::block_on(store.delete(&name))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(Response::new(Body::empty()))
    }
    .await;
    result.unwrap_or_else(|e| e.response(Api::Ollama))
}

/// `POST /api/pull`: the store's verified download of `model` (an RDRR folder's URL, as
/// `tritium serve-model` serves it, or a GGUF file's URL), progress as Ollama's NDJSON.
pub async fn pull(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let f = Fields::new(&map);
        let url = model_field(&f)?;
        let stream = f.bool("stream")?.unwrap_or(true);
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ApiError::invalid_param(
                "model",
                "give the model's URL (an RDRR folder as `tritium serve-model` serves it, or a GGUF file): there is no registry of names",
            ));
        }
        let name = crate::storage::model_name_from_url(&url).ok_or_else(|| {
            ApiError::invalid_param("model", format!("cannot make a model name from {url}"))
        })?;
        let store = app.registry.store()?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        std::thread::Builder::new()
            .name("pull".into())
            .spawn(move || super::pull::run(store, url, name, tx))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(super::pull::respond(rx, stream).await)
    }
    .await;
    result.unwrap_or_else(|e| e.response(Api::Ollama))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let t = UNIX_EPOCH + Duration::new(1_709_251_199, 5);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.000000005Z");
    }

    #[test]
    fn keep_alive_reads_durations_and_seconds() {
        let k = |v: Value| keep_alive(Some(&v)).unwrap();
        assert_eq!(
            k(json!("5m")),
            Some(KeepAlive::For(Duration::from_secs(300)))
        );
        assert_eq!(
            k(json!("1h30m")),
            Some(KeepAlive::For(Duration::from_secs(5400)))
        );
        assert_eq!(k(json!(0)), Some(KeepAlive::For(Duration::ZERO)));
        assert_eq!(k(json!("0")), Some(KeepAlive::For(Duration::ZERO)));
        assert_eq!(k(json!(-1)), Some(KeepAlive::Forever));
        assert_eq!(k(json!("-1m")), Some(KeepAlive::Forever));
        assert_eq!(keep_alive(None).unwrap(), None);
        assert!(keep_alive(Some(&json!("soon"))).is_err());
        assert!(keep_alive(Some(&json!([1]))).is_err());
    }
}
