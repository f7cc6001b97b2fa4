//! The OpenAI routes: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.
//! Request and response shapes as OpenAI's API reference has them; streaming as server-sent
//! events (a role chunk, content chunks, a last chunk with the finish reason, a usage chunk when
//! `stream_options.include_usage` asks for it, then `data: [DONE]`). An error after the stream
//! began is its last event (`data: {"error": ...}`), and the stream closes.

use std::collections::hash_map::RandomState;
use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::error::{Api, ApiError};
use super::generation::{Budget, Event, GenRequest, Outcome, Prompt};
use super::request::{json_object, type_name, Fields};
use super::App;
use crate::sampling::SamplerConfig;
use crate::text::ChatMessage;

/// Most stop strings a request may give.
const MAX_STOPS: usize = 16;

/// A seed for a request that gives none (OpenAI samples differently each time).
pub fn random_seed() -> u64 {
    RandomState::new().build_hasher().finish()
}

/// `chatcmpl-...` / `cmpl-...`: unique within the process, unpredictable across processes.
fn completion_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:016x}{n:x}", random_seed())
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The sampling fields OpenAI has (and the llama.cpp ones llama-server also takes: `top_k`,
/// `min_p`, `repeat_penalty`). Omitted ones take llama.cpp's defaults, as llama-server does;
/// an omitted seed is random.
fn sampling(f: &Fields) -> Result<SamplerConfig, ApiError> {
    let d = SamplerConfig::default();
    let top_p = f.number_in("top_p", 0.0, 1.0)?;
    Ok(SamplerConfig {
        temperature: f
            .number_in("temperature", 0.0, 2.0)?
            .map_or(d.temperature, |t| t as f32),
        // 0 keeps only the best candidate (the sampler wants more than 0).
        top_p: top_p.map_or(d.top_p, |p| (p as f32).max(f32::MIN_POSITIVE)),
        top_k: f
            .integer_min("top_k", 0)?
            .map_or(d.top_k, |k| k.min(u32::MAX as i64) as usize),
        min_p: f
            .number_in("min_p", 0.0, 1.0)?
            .map_or(d.min_p, |p| p as f32),
        repeat_penalty: match f.number("repeat_penalty")? {
            Some(r) if r <= 0.0 => {
                return Err(ApiError::invalid_param(
                    "repeat_penalty",
                    format!("`repeat_penalty` must be more than 0 (1 = off), got {r}"),
                ))
            }
            r => r.map_or(d.repeat_penalty, |r| r as f32),
        },
        repeat_last_n: d.repeat_last_n,
        frequency_penalty: f
            .number_in("frequency_penalty", -2.0, 2.0)?
            .map_or(0.0, |p| p as f32),
        presence_penalty: f
            .number_in("presence_penalty", -2.0, 2.0)?
            .map_or(0.0, |p| p as f32),
        seed: f.seed("seed")?.unwrap_or_else(random_seed),
    })
}

/// What both endpoints read besides the prompt.
struct Common {
    model: String,
    stream: bool,
    include_usage: bool,
    budget: Budget,
    sampling: SamplerConfig,
    stop: Vec<String>,
}

fn common(f: &Fields) -> Result<Common, ApiError> {
    let model = f
        .string("model")?
        .ok_or_else(|| ApiError::invalid_param("model", "`model` is required"))?
        .to_string();
    match f.integer("n")? {
        None | Some(1) => {}
        Some(n) => {
            return Err(ApiError::invalid_param(
                "n",
                format!("only n = 1 is supported (one choice per request), got {n}"),
            ))
        }
    }
    if f.bool("logprobs")? == Some(true) || f.has("top_logprobs") {
        return Err(ApiError::invalid_param(
            "logprobs",
            "logprobs are not supported: the engine does not report token probabilities",
        ));
    }
    let budget = match (
        f.integer("max_completion_tokens")?,
        f.integer("max_tokens")?,
    ) {
        (Some(n), _) => ("max_completion_tokens", n),
        (None, Some(n)) => ("max_tokens", n),
        (None, None) => ("", -1),
    };
    let budget = match budget {
        ("", _) => Budget::Context,
        (name, n) if n < 1 => {
            return Err(ApiError::invalid_param(
                name,
                format!("`{name}` must be at least 1, got {n}"),
            ))
        }
        (_, n) => Budget::Strict(usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let stop = f.strings("stop")?;
    if stop.len() > MAX_STOPS {
        return Err(ApiError::invalid_param(
            "stop",
            format!("at most {MAX_STOPS} stop sequences, got {}", stop.len()),
        ));
    }
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.object("stream_options")? {
        Some(o) => Fields::new(o).bool("include_usage")?.unwrap_or(false),
        None => false,
    };
    Ok(Common {
        model,
        stream,
        include_usage,
        budget,
        sampling: sampling(f)?,
        stop,
    })
}

/// A message's `content`: a string, or a list of parts whose text parts are joined.
fn content(i: usize, v: Option<&Value>) -> Result<String, ApiError> {
    let param = format!("messages[{i}].content");
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for p in parts {
                match p {
                    Value::String(s) => text.push_str(s),
                    Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                        match o.get("text") {
                            Some(Value::String(s)) => text.push_str(s),
                            _ => {
                                return Err(ApiError::invalid_param(
                                    &param,
                                    "a text part needs `text` as a string",
                                ))
                            }
                        }
                    }
                    _ => {
                        return Err(ApiError::invalid_param(
                            &param,
                            "only text content parts are supported",
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid_param(
            &param,
            format!(
                "`{param}` must be a string or a list of parts, got {}",
                type_name(other)
            ),
        )),
    }
}

/// `messages` as chat messages.
pub fn messages(list: Option<&Vec<Value>>) -> Result<Vec<ChatMessage>, ApiError> {
    let list = list.ok_or_else(|| ApiError::invalid_param("messages", "`messages` is required"))?;
    if list.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let Value::Object(m) = m else {
                return Err(ApiError::invalid_param(
                    &format!("messages[{i}]"),
                    format!("a message must be an object, got {}", type_name(m)),
                ));
            };
            let role = match m.get("role") {
                Some(Value::String(r)) if !r.is_empty() => r.as_str(),
                _ => {
                    return Err(ApiError::invalid_param(
                        &format!("messages[{i}].role"),
                        "every message needs a `role` string",
                    ))
                }
            };
            // OpenAI's newer name for the system role.
            let role = if role == "developer" { "system" } else { role };
            Ok(ChatMessage::new(role, content(i, m.get("content"))?))
        })
        .collect()
}

/// Refuse what this server does not do rather than ignore it silently.
fn refuse_unsupported(f: &Fields) -> Result<(), ApiError> {
    if f.array("tools")?.is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::invalid_param("tools", "tools are not supported"));
    }
    if let Some(rf) = f.object("response_format")? {
        match Fields::new(rf).string("type")? {
            None | Some("text") => {}
            Some(t) => {
                return Err(ApiError::invalid_param(
                    "response_format",
                    format!("response_format {t:?} is not supported (only \"text\")"),
                ))
            }
        }
    }
    Ok(())
}

/// The request's first event: `Started`, else its error.
pub async fn started(rx: &mut UnboundedReceiver<Event>) -> Result<usize, ApiError> {
    match rx.recv().await {
        Some(Event::Started { prompt_tokens }) => Ok(prompt_tokens),
        Some(Event::Failed(e)) => Err(e),
        Some(_) | None => Err(ApiError::internal(
            "the model's thread ended without an answer",
        )),
    }
}

/// The whole text and the outcome of a request that has started.
pub async fn collect(rx: &mut UnboundedReceiver<Event>) -> Result<(String, Outcome), ApiError> {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done(o)) => return Ok((text, o)),
            Some(Event::Failed(e)) => return Err(e),
            Some(Event::Started { .. }) => {}
            None => {
                return Err(ApiError::internal(
                    "the model's thread ended without an answer",
                ))
            }
        }
    }
}

fn usage(o: &Outcome) -> Value {
    json!({
        "prompt_tokens": o.usage.prompt_tokens,
        "completion_tokens": o.usage.generated_tokens,
        "total_tokens": o.usage.prompt_tokens + o.usage.generated_tokens,
        "prompt_tokens_details": { "cached_tokens": o.usage.cached_tokens },
    })
}

pub fn json_response(status: StatusCode, v: &Value) -> Response {
    let mut r = Response::new(Body::from(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A streamed body of `content_type` whose first frame is `first` and whose later frames
/// `frame` makes from each event (`None`: the stream ends after the frame).
pub fn event_stream(
    content_type: &'static str,
    first: Option<Bytes>,
    rx: UnboundedReceiver<Event>,
    frame: impl FnMut(Option<Event>) -> (Bytes, bool) + Send + 'static,
) -> Response {
    let rest = futures_util::stream::unfold(Some((rx, frame)), |state| async move {
        let (mut rx, mut frame) = state?;
        let event = rx.recv().await;
        let (bytes, more) = frame(event);
        Some((Ok::<Bytes, Infallible>(bytes), more.then_some((rx, frame))))
    });
    let stream = futures_util::stream::iter(first.map(Ok)).chain(rest);
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Ask reverse proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

fn sse_error(e: &ApiError) -> Bytes {
    sse(&e.body(Api::OpenAi))
}

/// Which endpoint a response is for.
#[derive(Copy, Clone)]
enum Kind {
    Chat,
    Completion,
}

struct Shape {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
}

impl Shape {
    fn new(kind: Kind, model: String) -> Shape {
        Shape {
            id: completion_id(match kind {
                Kind::Chat => "chatcmpl",
                Kind::Completion => "cmpl",
            }),
            kind,
            created: unix_now(),
            model,
        }
    }

    fn whole(&self, text: String, o: &Outcome) -> Value {
        let choice = match self.kind {
            Kind::Chat => json!({
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "logprobs": null,
                "finish_reason": o.finish_reason(),
            }),
            Kind::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": o.finish_reason(),
            }),
        };
        json!({
            "id": self.id,
            "object": match self.kind { Kind::Chat => "chat.completion", Kind::Completion => "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": super::fingerprint(),
            "choices": [choice],
            "usage": usage(o),
        })
    }

    /// A chunk with one choice: a chat delta or completion text, and a finish reason.
    fn chunk(&self, piece: Value, finish: Option<&str>, include_usage: bool) -> Value {
        let choice = match self.kind {
            Kind::Chat => {
                json!({ "index": 0, "delta": piece, "logprobs": null, "finish_reason": finish })
            }
            Kind::Completion => {
                json!({ "index": 0, "text": piece, "logprobs": null, "finish_reason": finish })
            }
        };
        let mut v = json!({
            "id": self.id,
            "object": match self.kind { Kind::Chat => "chat.completion.chunk", Kind::Completion => "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": super::fingerprint(),
            "choices": [choice],
        });
        if include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    fn usage_chunk(&self, o: &Outcome) -> Value {
        json!({
            "id": self.id,
            "object": match self.kind { Kind::Chat => "chat.completion.chunk", Kind::Completion => "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": super::fingerprint(),
            "choices": [],
            "usage": usage(o),
        })
    }
}

/// Run one parsed request and answer it, whole or streamed.
async fn answer(
    app: &Arc<App>,
    kind: Kind,
    c: Common,
    prompt: Prompt,
) -> Result<Response, ApiError> {
    let request = GenRequest {
        prompt,
        budget: c.budget,
        sampling: c.sampling,
        stop: c.stop,
    };
    let (name, mut rx) = app.registry.submit(&c.model, Some(request), None)?;
    started(&mut rx).await?;
    let shape = Shape::new(kind, name);
    if !c.stream {
        let (text, outcome) = collect(&mut rx).await?;
        return Ok(json_response(StatusCode::OK, &shape.whole(text, &outcome)));
    }
    let include_usage = c.include_usage;
    let first = match kind {
        Kind::Chat => Some(sse(&shape.chunk(
            json!({ "role": "assistant", "content": "" }),
            None,
            include_usage,
        ))),
        Kind::Completion => None,
    };
    let piece = move |text: String| match kind {
        Kind::Chat => json!({ "content": text }),
        Kind::Completion => Value::String(text),
    };
    Ok(event_stream(
        "text/event-stream",
        first,
        rx,
        move |event| match event {
            Some(Event::Text(t)) => (sse(&shape.chunk(piece(t), None, include_usage)), true),
            Some(Event::Started { .. }) => (Bytes::new(), true),
            Some(Event::Done(o)) => {
                let empty = match kind {
                    Kind::Chat => json!({}),
                    Kind::Completion => Value::String(String::new()),
                };
                let mut out =
                    sse(&shape.chunk(empty, Some(o.finish_reason()), include_usage)).to_vec();
                if include_usage {
                    out.extend_from_slice(&sse(&shape.usage_chunk(&o)));
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                (Bytes::from(out), false)
            }
            Some(Event::Failed(e)) => (sse_error(&e), false),
            None => (
                sse_error(&ApiError::internal(
                    "the model's thread ended without finishing the stream",
                )),
                false,
            ),
        },
    ))
}

async fn read(app: &App, body: Body) -> Result<Map<String, Value>, ApiError> {
    json_object(body, app.body_limit).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let f = Fields::new(&map);
        let c = common(&f)?;
        refuse_unsupported(&f)?;
        let messages = messages(f.array("messages")?)?;
        answer(&app, Kind::Chat, c, Prompt::Chat(messages)).await
    }
    .await;
    result.unwrap_or_else(|e| e.response(Api::OpenAi))
}

/// `POST /v1/completions`.
pub async fn completions(State(app): State<Arc<App>>, body: Body) -> Response {
    let result = async {
        let map = read(&app, body).await?;
        let f = Fields::new(&map);
        let c = common(&f)?;
        for (field, bad) in [("echo", true)] {
            if f.bool(field)? == Some(bad) {
                return Err(ApiError::invalid_param(
                    field,
                    format!("`{field}` is not supported"),
                ));
            }
        }
        if f.has("suffix") {
            return Err(ApiError::invalid_param(
                "suffix",
                "`suffix` is not supported",
            ));
        }
        if f.integer("best_of")?.is_some_and(|b| b != 1) {
            return Err(ApiError::invalid_param(
                "best_of",
                "only best_of = 1 is supported",
            ));
        }
        let prompt = match map.get("prompt") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
                a[0].as_str().unwrap_or_default().to_string()
            }
            Some(Value::Array(_)) => {
                return Err(ApiError::invalid_param(
                    "prompt",
                    "`prompt` must be one string (a list of several prompts, or of token ids, \
                     is not supported)",
                ))
            }
            None | Some(Value::Null) => {
                return Err(ApiError::invalid_param("prompt", "`prompt` is required"))
            }
            Some(v) => {
                return Err(ApiError::invalid_param(
                    "prompt",
                    format!("`prompt` must be a string, got {}", type_name(v)),
                ))
            }
        };
        answer(&app, Kind::Completion, c, Prompt::Text(prompt)).await
    }
    .await;
    result.unwrap_or_else(|e| e.response(Api::OpenAi))
}

/// One model in `/v1/models`.
fn model_object(name: &str, created: u64) -> Value {
    json!({ "id": name, "object": "model", "created": created, "owned_by": "tritium" })
}

/// `GET /v1/models`.
pub async fn list_models(State(app): State<Arc<App>>) -> Response {
    match super::known_models(&app).await {
        Ok(models) => json_response(
            StatusCode::OK,
            &json!({
                "object": "list",
                "data": models.iter().map(|m| model_object(&m.name, m.modified)).collect::<Vec<_>>(),
            }),
        ),
        Err(e) => e.response(Api::OpenAi),
    }
}

/// `GET /v1/models/{id}`.
pub async fn get_model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match super::known_models(&app).await {
        Ok(models) => match models.iter().find(|m| m.name == id) {
            Some(m) => json_response(StatusCode::OK, &model_object(&m.name, m.modified)),
            None => ApiError::model_not_found(&id, "no such model").response(Api::OpenAi),
        },
        Err(e) => e.response(Api::OpenAi),
    }
}
