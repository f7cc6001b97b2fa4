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
use super::generation::{
    Budget, Event, GenRequest, Outcome, Prompt, TokenLogprob, TokenText, MAX_TOP_LOGPROBS,
};
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
    /// Log-probabilities with this many alternatives per token.
    logprobs: Option<usize>,
    /// llama-server's `lora`: `[{"id": 0, "scale": 0.5}]`.
    lora: Option<Vec<(usize, f32)>>,
}

/// llama-server's `lora` field: the server's adapters to apply, by index, each with its scale
/// (default 1), the others off.
fn lora(f: &Fields) -> Result<Option<Vec<(usize, f32)>>, ApiError> {
    let Some(list) = f.array("lora")? else {
        return Ok(None);
    };
    if list.len() > 64 {
        return Err(ApiError::invalid_param(
            "lora",
            format!("at most 64 adapters, got {}", list.len()),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let serde_json::Value::Object(o) = entry else {
            return Err(ApiError::invalid_param(
                "lora",
                format!("`lora[{i}]` must be an object {{\"id\", \"scale\"}}"),
            ));
        };
        let f = Fields::new(o);
        let inner =
            |e: ApiError| ApiError::invalid_param("lora", format!("`lora[{i}]`: {}", e.message));
        let id = f
            .integer("id")
            .map_err(inner)?
            .filter(|&id| id >= 0)
            .ok_or_else(|| {
                ApiError::invalid_param("lora", format!("`lora[{i}].id` must be an adapter index"))
            })?;
        let scale = f.number("scale").map_err(inner)?.unwrap_or(1.0) as f32;
        if !scale.is_finite() {
            return Err(ApiError::invalid_param(
                "lora",
                format!("`lora[{i}].scale` is out of range"),
            ));
        }
        if out.iter().any(|&(other, _)| other == id as usize) {
            return Err(ApiError::invalid_param(
                "lora",
                format!("adapter {id} is given twice"),
            ));
        }
        out.push((id as usize, scale));
    }
    Ok(Some(out))
}

/// What a request asks of log-probabilities. Chat: `logprobs` (a boolean) and
/// `top_logprobs` (0 to 20, only with `logprobs: true`, as OpenAI requires); completions:
/// `logprobs` as the number of alternatives (OpenAI allows up to 5, llama-server more; here
/// up to 20).
fn logprobs(f: &Fields, kind: Kind) -> Result<Option<usize>, ApiError> {
    let max = MAX_TOP_LOGPROBS as i64;
    let top = |name: &str, n: i64| {
        if (0..=max).contains(&n) {
            Ok(n as usize)
        } else {
            Err(ApiError::invalid_param(
                name,
                format!("`{name}` must be between 0 and {max}, got {n}"),
            ))
        }
    };
    match kind {
        Kind::Chat => {
            let on = f.bool("logprobs")?.unwrap_or(false);
            match f.integer("top_logprobs")? {
                Some(_) if !on => Err(ApiError::invalid_param(
                    "top_logprobs",
                    "`logprobs` must be true when `top_logprobs` is given",
                )),
                Some(n) => Ok(Some(top("top_logprobs", n)?)),
                None => Ok(on.then_some(0)),
            }
        }
        Kind::Completion => match f.integer("logprobs")? {
            Some(n) => Ok(Some(top("logprobs", n)?)),
            None => Ok(None),
        },
    }
}

fn common(f: &Fields, kind: Kind) -> Result<Common, ApiError> {
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
        logprobs: logprobs(f, kind)?,
        lora: lora(f)?,
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

/// The whole text, the tokens' log-probabilities (when asked for) and the outcome of a
/// request that has started.
pub async fn collect(
    rx: &mut UnboundedReceiver<Event>,
) -> Result<(String, Vec<TokenLogprob>, Outcome), ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    loop {
        match rx.recv().await {
            Some(Event::Text(t, lp)) => {
                text.push_str(&t);
                logprobs.extend(lp);
            }
            Some(Event::Done(o)) => return Ok((text, logprobs, o)),
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

/// A log-probability as JSON: one of a token with no probability at all (a -inf logit) is
/// -9999, the floor OpenAI reports, since JSON has no -inf.
fn lp_json(lp: f32) -> Value {
    if lp.is_finite() {
        json!(lp)
    } else {
        json!(-9999.0)
    }
}

fn token_json(t: &TokenText, lp: f32) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("token".into(), Value::String(t.text.clone()));
    m.insert("logprob".into(), lp_json(lp));
    m.insert("bytes".into(), json!(t.bytes));
    m
}

/// Chat's `logprobs`: `{content: [{token, logprob, bytes, top_logprobs: [...]}], refusal}`.
fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let mut m = token_json(&lp.token, lp.logprob);
            let top: Vec<Value> = lp
                .top
                .iter()
                .map(|(t, l)| Value::Object(token_json(t, *l)))
                .collect();
            m.insert("top_logprobs".into(), Value::Array(top));
            Value::Object(m)
        })
        .collect();
    json!({ "content": content, "refusal": null })
}

/// Completions' (legacy) `logprobs`: `{tokens, token_logprobs, top_logprobs: [{token:
/// logprob}], text_offset}`; `offset`: characters of the completion before these tokens,
/// advanced past them. Alternatives whose text is the same are one key (the likelier).
fn completion_logprobs(lps: &[TokenLogprob], offset: &mut usize) -> Value {
    let mut text_offset = Vec::with_capacity(lps.len());
    for lp in lps {
        text_offset.push(*offset);
        *offset += lp.token.text.chars().count();
    }
    let top: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let mut m = Map::new();
            for (t, l) in &lp.top {
                m.entry(t.text.clone()).or_insert_with(|| lp_json(*l));
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "tokens": lps.iter().map(|lp| lp.token.text.clone()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|lp| lp_json(lp.logprob)).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": text_offset,
    })
}

/// Which endpoint a response is for.
#[derive(Copy, Clone, PartialEq, Eq)]
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

    /// The `logprobs` of a choice for these tokens (`null` when not asked for).
    fn logprobs(&self, lps: Option<&[TokenLogprob]>, offset: &mut usize) -> Value {
        match (lps, self.kind) {
            (None, _) => Value::Null,
            (Some(l), Kind::Chat) => chat_logprobs(l),
            (Some(l), Kind::Completion) => completion_logprobs(l, offset),
        }
    }

    fn whole(&self, text: String, lps: Option<&[TokenLogprob]>, o: &Outcome) -> Value {
        let logprobs = self.logprobs(lps, &mut 0);
        let choice = match self.kind {
            Kind::Chat => json!({
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "logprobs": logprobs,
                "finish_reason": o.finish_reason(),
            }),
            Kind::Completion => json!({
                "index": 0,
                "text": text,
                "logprobs": logprobs,
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
    fn chunk(
        &self,
        piece: Value,
        logprobs: Value,
        finish: Option<&str>,
        include_usage: bool,
    ) -> Value {
        let choice = match self.kind {
            Kind::Chat => {
                json!({ "index": 0, "delta": piece, "logprobs": logprobs, "finish_reason": finish })
            }
            Kind::Completion => {
                json!({ "index": 0, "text": piece, "logprobs": logprobs, "finish_reason": finish })
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
        logprobs: c.logprobs,
        context: None,
        lora: c.lora,
    };
    let want_logprobs = c.logprobs.is_some();
    let (name, mut rx) = app.registry.submit(&c.model, Some(request), None)?;
    started(&mut rx).await?;
    let shape = Shape::new(kind, name);
    if !c.stream {
        let (text, lps, outcome) = collect(&mut rx).await?;
        let lps = want_logprobs.then_some(&lps[..]);
        return Ok(json_response(
            StatusCode::OK,
            &shape.whole(text, lps, &outcome),
        ));
    }
    let include_usage = c.include_usage;
    let first = match kind {
        Kind::Chat => Some(sse(&shape.chunk(
            json!({ "role": "assistant", "content": "" }),
            Value::Null,
            None,
            include_usage,
        ))),
        Kind::Completion => None,
    };
    let piece = move |text: String| match kind {
        Kind::Chat => json!({ "content": text }),
        Kind::Completion => Value::String(text),
    };
    // Characters of the completion streamed so far (completions' `text_offset`).
    let mut offset = 0;
    Ok(event_stream(
        "text/event-stream",
        first,
        rx,
        move |event| match event {
            Some(Event::Text(t, lps)) => {
                let lps = shape.logprobs(want_logprobs.then_some(&lps[..]), &mut offset);
                (sse(&shape.chunk(piece(t), lps, None, include_usage)), true)
            }
            Some(Event::Started { .. }) => (Bytes::new(), true),
            Some(Event::Done(o)) => {
                let empty = match kind {
                    Kind::Chat => json!({}),
                    Kind::Completion => Value::String(String::new()),
                };
                let mut out =
                    sse(&shape.chunk(empty, Value::Null, Some(o.finish_reason()), include_usage))
                        .to_vec();
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
        let c = common(&f, Kind::Chat)?;
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
        let c = common(&f, Kind::Completion)?;
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
