//! What a request asks a model for ([`GenRequest`]), what the model's thread sends back while
//! it works ([`Event`]), and the generation itself, on that thread: the prompt rendered and
//! tokenized as `tritium run` does, checked against the context, then generated token by token,
//! text released through the stop strings, until a stop, the budget, or the client leaving.

use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::error::ApiError;
use super::metrics::Metrics;
use crate::engine::{FinishReason, GenerateOptions, TokenControl, TokenLogprobs, Usage};
use crate::sampling::SamplerConfig;
use crate::session::Session;
use crate::text::{encode_chat, ChatMessage, StopStream, Tokenizer};

/// The prompt of a request.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// Rendered with the model's chat template, the assistant's turn opened (as `tritium run
    /// --chat`).
    Chat(Vec<ChatMessage>),
    /// Tokenized as it is, BOS added as the tokenizer says (as `tritium run -p`).
    Text(String),
}

/// How many tokens a request may generate.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Exactly this many at most, and the prompt plus this many must fit the context (OpenAI:
    /// otherwise `context_length_exceeded`).
    Strict(usize),
    /// At most this many, fewer when the context ends first (Ollama's `num_predict`).
    UpTo(usize),
    /// Until the context ends.
    Context,
}

/// One generation a request asks for.
#[derive(Clone, Debug)]
pub struct GenRequest {
    pub prompt: Prompt,
    pub budget: Budget,
    pub sampling: SamplerConfig,
    /// Text that ends the generation, never part of it.
    pub stop: Vec<String>,
    /// Report each token's log-probability with this many alternatives (at most
    /// [`MAX_TOP_LOGPROBS`]).
    pub logprobs: Option<usize>,
    /// The context the model should run with (Ollama's `num_ctx`; at most the trained
    /// context): a loaded model with another is loaded again with this one first.
    pub context: Option<usize>,
    /// The server's LoRA adapters to apply (index, scale), the others off; `None`: each at
    /// its `--lora` scale (llama-server's `lora` field).
    pub lora: Option<Vec<(usize, f32)>>,
}

/// Most alternatives a token's log-probability comes with (OpenAI's limit for `top_logprobs`).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A token as the APIs show it: its text (bytes that are not whole UTF-8 characters as
/// U+FFFD) and its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenText {
    pub text: String,
    pub bytes: Vec<u8>,
}

/// A generated token's log-probability (the model's, see [`crate::engine::TokenLogprobs`])
/// and the most likely alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenText,
    pub logprob: f32,
    pub top: Vec<(TokenText, f32)>,
}

/// What the model's thread tells the request that waits for it.
#[derive(Debug)]
pub enum Event {
    /// The prompt fits and generation starts.
    Started { prompt_tokens: usize },
    /// Text released (whole characters, never part of a stop string), with the
    /// log-probabilities of the tokens generated since the last text (when asked for: the
    /// tokens whose text a stop string held back and then dropped are in none).
    Text(String, Vec<TokenLogprob>),
    /// The end.
    Done(Outcome),
    /// The request failed (before `Started`: answered as an HTTP error; after it: the last
    /// event of the stream).
    Failed(ApiError),
}

/// How a generation ended, with its figures.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// `Stop` or `Length` (a cancelled generation has no one to tell).
    pub finish: FinishReason,
    pub usage: Usage,
    /// Milliseconds spent loading the model for this request (0 when it was loaded).
    pub load_ms: f64,
    /// Milliseconds from the request's arrival at the queue to the end of the generation.
    pub total_ms: f64,
    /// The prompt's and the generation's token ids (Ollama's `context`).
    pub prompt_ids: Vec<u32>,
    pub ids: Vec<u32>,
}

impl Outcome {
    /// OpenAI's and Ollama's name of the finish reason.
    pub fn finish_reason(&self) -> &'static str {
        match self.finish {
            FinishReason::Length => "length",
            FinishReason::Stop | FinishReason::Cancelled => "stop",
        }
    }
}

/// The text and bytes of token `id`.
fn token_text(tok: &Tokenizer, id: u32) -> TokenText {
    let bytes = match tok.token_bytes(id) {
        Some(b) => b.to_vec(),
        None => tok.decode(&[id], false).unwrap_or_default().into_bytes(),
    };
    TokenText {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
    }
}

fn token_logprob(tok: &Tokenizer, lp: &TokenLogprobs) -> TokenLogprob {
    TokenLogprob {
        token: token_text(tok, lp.id),
        logprob: lp.logprob,
        top: lp
            .top
            .iter()
            .map(|&(id, l)| (token_text(tok, id), l))
            .collect(),
    }
}

/// The token ids of `prompt` for `session`.
fn prompt_ids(session: &Session, prompt: &Prompt) -> Result<Vec<u32>, ApiError> {
    let tok = session.tokenizer.as_ref().ok_or_else(|| {
        ApiError::invalid("the model has no tokenizer metadata, so it cannot take text prompts")
    })?;
    let ids = match prompt {
        Prompt::Chat(messages) => {
            let rendered = session.template.render(messages, true).map_err(|e| {
                ApiError::invalid_param("messages", format!("the chat template refused: {e}"))
            })?;
            encode_chat(tok, &rendered)
        }
        Prompt::Text(text) => tok.encode(text, true),
    }
    .map_err(|e| ApiError::internal(format!("tokenizing the prompt: {e}")))?;
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            "prompt",
            "the prompt is empty (and the model adds no BOS token)",
        ));
    }
    Ok(ids)
}

/// The most tokens `budget` allows after a prompt of `prompt` tokens in a context of `ctx`.
fn max_tokens(budget: Budget, prompt: usize, ctx: usize) -> Result<usize, ApiError> {
    if prompt >= ctx {
        return Err(ApiError::context_length(format!(
            "this model's maximum context length is {ctx} tokens, and the prompt has {prompt} \
             tokens, leaving no room for a completion"
        )));
    }
    let room = ctx - prompt;
    match budget {
        Budget::Strict(n) if n > room => Err(ApiError::context_length(format!(
            "this model's maximum context length is {ctx} tokens; the request asks for {} \
             tokens ({prompt} in the prompt, {n} in the completion): ask for at most {room} \
             completion tokens or send a shorter prompt",
            prompt as u128 + n as u128
        ))),
        Budget::Strict(n) => Ok(n),
        Budget::UpTo(n) => Ok(n.min(room)),
        Budget::Context => Ok(room),
    }
}

/// Run `request` on `session`, sending its events to `events`; `arrived`: when the request
/// reached the queue; `load_ms`: the model's load time charged to it.
pub fn run(
    session: &mut Session,
    request: &GenRequest,
    events: &UnboundedSender<Event>,
    arrived: Instant,
    load_ms: f64,
    metrics: &Metrics,
) {
    if let Err(e) = generate(session, request, events, arrived, load_ms, metrics) {
        let _ = events.send(Event::Failed(e));
    }
}

fn generate(
    session: &mut Session,
    request: &GenRequest,
    events: &UnboundedSender<Event>,
    arrived: Instant,
    load_ms: f64,
    metrics: &Metrics,
) -> Result<(), ApiError> {
    let ids = prompt_ids(session, &request.prompt)?;
    let ctx = session.engine.model.ctx;
    let max_tokens = max_tokens(request.budget, ids.len(), ctx)?;
    request
        .sampling
        .validate()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let Session {
        engine, tokenizer, ..
    } = session;
    let Some(tok) = tokenizer.as_ref() else {
        return Err(ApiError::internal("the tokenizer went away"));
    };
    let options = GenerateOptions {
        max_tokens,
        sampling: request.sampling,
        stop_ids: tok.stop_ids().to_vec(),
    };
    if events
        .send(Event::Started {
            prompt_tokens: ids.len(),
        })
        .is_err()
    {
        // The client left while the request waited.
        return Ok(());
    }
    let mut stream = StopStream::new(&request.stop);
    let mut failure = None;
    let start = Instant::now();
    let mut last = start;
    let mut first = true;
    // Log-probabilities of tokens whose text is not released yet.
    let mut pending = Vec::new();
    let mut string_stop = false;
    let generation = pollster::block_on(engine.generate_with_logprobs(
        &ids,
        &options,
        request.logprobs.map(|n| n.min(MAX_TOP_LOGPROBS)),
        |id, lp| {
            let now = Instant::now();
            if first {
                metrics.first_token(now - arrived);
                first = false;
            } else {
                metrics.next_token(now - last);
            }
            last = now;
            if events.is_closed() {
                return TokenControl::Cancel;
            }
            if let Some(lp) = &lp {
                pending.push(token_logprob(tok, lp));
            }
            match stream.push(tok, id) {
                Ok((text, stop)) => {
                    if !text.is_empty()
                        && events
                            .send(Event::Text(text, std::mem::take(&mut pending)))
                            .is_err()
                    {
                        return TokenControl::Cancel;
                    }
                    if stop {
                        string_stop = true;
                        TokenControl::Stop
                    } else {
                        TokenControl::Continue
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    TokenControl::Cancel
                }
            }
        },
    ));
    let generation = generation.map_err(|e| ApiError::internal(format!("generation: {e}")))?;
    if let Some(e) = failure {
        return Err(ApiError::internal(format!("detokenizing: {e}")));
    }
    metrics.tokens(
        generation.usage.prompt_tokens,
        generation.usage.generated_tokens,
    );
    if generation.finish_reason == FinishReason::Cancelled {
        metrics.cancelled();
        return Ok(());
    }
    let tail = stream.finish();
    if string_stop {
        // The tokens after the last text released lie in the stop string.
        pending.clear();
    }
    if !tail.is_empty() || !pending.is_empty() {
        let _ = events.send(Event::Text(tail, pending));
    }
    let _ = events.send(Event::Done(Outcome {
        finish: generation.finish_reason,
        usage: generation.usage,
        load_ms,
        total_ms: arrived.elapsed().as_secs_f64() * 1e3,
        prompt_ids: generation.prompt_ids,
        ids: generation.ids,
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_against_the_context() {
        assert_eq!(max_tokens(Budget::Context, 10, 100), Ok(90));
        assert_eq!(max_tokens(Budget::UpTo(500), 10, 100), Ok(90));
        assert_eq!(max_tokens(Budget::UpTo(5), 10, 100), Ok(5));
        assert_eq!(max_tokens(Budget::Strict(90), 10, 100), Ok(90));
        let e = max_tokens(Budget::Strict(91), 10, 100).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        let e = max_tokens(Budget::Strict(usize::MAX), 10, 100).unwrap_err();
        assert!(e.message.contains(&(usize::MAX as u128 + 10).to_string()));
        let e = max_tokens(Budget::Context, 100, 100).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
    }
}
