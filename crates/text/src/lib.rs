//! Text in and out of a model: the tokenizer, incremental decoding and chat templates.
//!
//! - [`Tokenizer`]: built with the `tokenizers` crate, from a GGUF file's tokenizer metadata
//!   (`gpt2` byte-level BPE with the pre-tokenizer `tokenizer.ggml.pre` names, or `llama`
//!   SentencePiece) or from a `tokenizer.json`. GGUF tokenizers follow llama.cpp's reading of the
//!   metadata (defaults, special tokens, end-of-generation tokens), so that a prompt gives the
//!   ids llama.cpp gives.
//! - [`TextStream`]: decodes generated ids one at a time and only ever emits whole UTF-8
//!   characters (a byte-level BPE or `<0xXX>` byte token can hold part of a character).
//! - [`ChatTemplate`]: the model's `tokenizer.chat_template` (Jinja, rendered with minijinja the
//!   way transformers renders it), with a fallback when a model has none.

use tritium_core::formats;

mod chat;
mod gguf_vocab;
mod pretok;
mod specials;
mod spm;
mod stop;
mod stream;
mod tokenizer;

#[cfg(test)]
mod tests;

pub use chat::{ChatMessage, ChatTemplate, TemplateOrigin, BITNET_TEMPLATE, CHATML_TEMPLATE};
pub use pretok::KNOWN_PRE_TOKENIZERS;
pub use stop::{encode_chat, StopStream};
pub use stream::TextStream;
pub use tokenizer::{Tokenizer, TokenizerKind};

/// Errors of the tokenizer and the chat templates.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A GGUF tokenizer key is missing or has the wrong type or value.
    #[error("GGUF tokenizer metadata '{key}': {problem}")]
    Metadata { key: String, problem: String },
    #[error(
        "tokenizer model '{0}' is not supported (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece)"
    )]
    UnsupportedModel(String),
    #[error(
        "pre-tokenizer '{0}' (tokenizer.ggml.pre) is not known; known: {known}",
        known = KNOWN_PRE_TOKENIZERS.join(", ")
    )]
    UnknownPreTokenizer(String),
    /// An error of the `tokenizers` crate (building, encoding, decoding, parsing tokenizer.json).
    #[error("tokenizer: {0}")]
    Tokenizers(String),
    #[error("token id {id} is out of range (vocabulary of {vocab_size})")]
    IdOutOfRange { id: u32, vocab_size: usize },
    /// A chat template that does not parse, or fails while rendering (including the template's
    /// own `raise_exception`).
    #[error("chat template: {0}")]
    Template(String),
}

impl TextError {
    pub(crate) fn tokenizers(e: impl std::fmt::Display) -> Self {
        TextError::Tokenizers(e.to_string())
    }

    pub(crate) fn metadata(key: &str, problem: impl Into<String>) -> Self {
        TextError::Metadata {
            key: key.to_string(),
            problem: problem.into(),
        }
    }
}
