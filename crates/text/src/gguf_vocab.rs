//! Reading a GGUF file's tokenizer metadata (`tokenizer.ggml.*`), as llama.cpp reads it.

use crate::formats::gguf::{Array, GgufFile, Value};

use super::TextError;

/// `tokenizer.ggml.model`: which algorithm the vocabulary is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabModel {
    /// `gpt2`: byte-level BPE with merges and a regex pre-tokenizer.
    Bpe,
    /// `llama`: SentencePiece BPE driven by piece scores, with `<0xXX>` byte fallback.
    Spm,
}

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    /// Special tokens (`<s>`, `<|im_start|>`, ...): matched in text, skipped by decode when asked.
    Control,
    /// Added tokens that are ordinary text (matched whole in text, always decoded).
    UserDefined,
    Unused,
    /// `<0xXX>` byte-fallback pieces of SentencePiece vocabularies.
    Byte,
}

impl TokenType {
    fn from_i64(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// Everything the tokenizer needs from a GGUF file.
#[derive(Debug, Clone)]
pub(crate) struct GgufVocab {
    pub model: VocabModel,
    /// `tokenizer.ggml.pre`, when present.
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// Piece scores (SentencePiece); zeros when absent.
    pub scores: Vec<f32>,
    pub types: Vec<TokenType>,
    /// `tokenizer.ggml.merges` ("left right"), BPE only.
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    /// Fill-in-the-middle ids (`fim_pre`, `fim_suf`, `fim_mid`, `fim_pad`, `fim_rep`, `fim_sep`).
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";

impl GgufVocab {
    pub fn read(gguf: &GgufFile) -> Result<GgufVocab, TextError> {
        let model_name = gguf
            .get_str(KEY_MODEL)
            .ok_or_else(|| TextError::metadata(KEY_MODEL, "missing (the file has no tokenizer)"))?;
        let model = match model_name {
            "gpt2" => VocabModel::Bpe,
            "llama" => VocabModel::Spm,
            // llama.cpp's marker for a model without a vocabulary (token ids only).
            "none" | "no_vocab" => {
                return Err(TextError::metadata(
                    KEY_MODEL,
                    format!("{model_name:?}: the file has no tokenizer"),
                ))
            }
            other => return Err(TextError::UnsupportedModel(other.to_string())),
        };
        let tokens = string_array(gguf, KEY_TOKENS)?
            .ok_or_else(|| TextError::metadata(KEY_TOKENS, "missing"))?;
        if tokens.is_empty() {
            return Err(TextError::metadata(KEY_TOKENS, "empty"));
        }
        if u32::try_from(tokens.len()).is_err() {
            return Err(TextError::metadata(KEY_TOKENS, "more than 2^32 tokens"));
        }
        let n = tokens.len();
        // llama.cpp renames empty tokens so that every token has a distinct, non-empty text.
        let tokens: Vec<String> = tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    t
                }
            })
            .collect();

        let scores = match gguf.get(KEY_SCORES) {
            None => vec![0.0; n],
            Some(v) => {
                let s = number_array(v)
                    .ok_or_else(|| TextError::metadata(KEY_SCORES, "expected a numeric array"))?;
                if s.len() < n {
                    return Err(TextError::metadata(
                        KEY_SCORES,
                        format!("{} scores for {n} tokens", s.len()),
                    ));
                }
                s.into_iter().take(n).map(|x| x as f32).collect()
            }
        };
        let types = match gguf.get(KEY_TYPES) {
            None => vec![TokenType::Normal; n],
            Some(v) => {
                let t = number_array(v)
                    .ok_or_else(|| TextError::metadata(KEY_TYPES, "expected an integer array"))?;
                if t.len() < n {
                    return Err(TextError::metadata(
                        KEY_TYPES,
                        format!("{} token types for {n} tokens", t.len()),
                    ));
                }
                t.into_iter()
                    .take(n)
                    .map(|x| TokenType::from_i64(x as i64))
                    .collect()
            }
        };
        let merges = match model {
            VocabModel::Bpe => string_array(gguf, KEY_MERGES)?.ok_or_else(|| {
                TextError::metadata(KEY_MERGES, "missing (a gpt2 BPE tokenizer needs merges)")
            })?,
            VocabModel::Spm => Vec::new(),
        };

        let id = |key: &str| -> Result<Option<u32>, TextError> {
            let full = format!("tokenizer.ggml.{key}");
            match gguf.get(&full) {
                None => Ok(None),
                Some(v) => {
                    // llama.cpp ignores an id outside the vocabulary (with a warning); so do we.
                    let id = v.as_u64().ok_or_else(|| {
                        TextError::metadata(&full, format!("expected a token id, got {v:?}"))
                    })?;
                    Ok(u32::try_from(id).ok().filter(|&i| (i as usize) < n))
                }
            }
        };
        let flag = |key: &str| -> Result<Option<bool>, TextError> {
            let full = format!("tokenizer.ggml.{key}");
            match gguf.get(&full) {
                None => Ok(None),
                Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                    TextError::metadata(&full, format!("expected a bool, got {v:?}"))
                }),
            }
        };

        // Defaults where the file says nothing, as llama.cpp has them for SentencePiece
        // (<unk>=0, <s>=1, </s>=2). For gpt2 BPE llama.cpp defaults BOS and EOS to id 11 (a
        // leftover from Falcon); we leave them unset instead.
        let (d_bos, d_eos, d_unk) = match model {
            VocabModel::Spm => (Some(1), Some(2), Some(0)),
            VocabModel::Bpe => (None, None, None),
        };
        let in_range = |d: Option<u32>| d.filter(|&i| (i as usize) < n);
        Ok(GgufVocab {
            model,
            pre: gguf.get_str("tokenizer.ggml.pre").map(str::to_string),
            bos: id("bos_token_id")?.or(in_range(d_bos)),
            eos: id("eos_token_id")?.or(in_range(d_eos)),
            eot: id("eot_token_id")?,
            eom: id("eom_token_id")?,
            unk: id("unknown_token_id")?.or(in_range(d_unk)),
            pad: id("padding_token_id")?,
            // The older names (prefix/suffix/middle) are what older converters wrote.
            fim_pre: id("fim_pre_token_id")?.or(id("prefix_token_id")?),
            fim_suf: id("fim_suf_token_id")?.or(id("suffix_token_id")?),
            fim_mid: id("fim_mid_token_id")?.or(id("middle_token_id")?),
            fim_pad: id("fim_pad_token_id")?,
            fim_rep: id("fim_rep_token_id")?,
            fim_sep: id("fim_sep_token_id")?,
            add_bos: flag("add_bos_token")?,
            add_eos: flag("add_eos_token")?,
            add_space_prefix: flag("add_space_prefix")?,
            tokens,
            scores,
            types,
            merges,
        })
    }
}

/// A string array, `None` when the key is absent.
fn string_array(gguf: &GgufFile, key: &str) -> Result<Option<Vec<String>>, TextError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(Value::Array(Array::String(v))) => Ok(Some(v.clone())),
        Some(v) => Err(TextError::metadata(
            key,
            format!("expected an array of strings, got type id {}", v.type_id()),
        )),
    }
}

/// Any numeric array as f64.
fn number_array(v: &Value) -> Option<Vec<f64>> {
    let a = v.as_array()?;
    Some(match a {
        Array::F32(v) => v.iter().map(|&x| x.into()).collect(),
        Array::F64(v) => v.clone(),
        Array::I32(v) => v.iter().map(|&x| x.into()).collect(),
        Array::U32(v) => v.iter().map(|&x| x.into()).collect(),
        Array::I64(v) => v.iter().map(|&x| x as f64).collect(),
        Array::U64(v) => v.iter().map(|&x| x as f64).collect(),
        Array::I16(v) => v.iter().map(|&x| x.into()).collect(),
        Array::U16(v) => v.iter().map(|&x| x.into()).collect(),
        Array::I8(v) => v.iter().map(|&x| x.into()).collect(),
        Array::U8(v) => v.iter().map(|&x| x.into()).collect(),
        _ => return None,
    })
}
