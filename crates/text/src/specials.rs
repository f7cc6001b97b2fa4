//! Special tokens of a GGUF vocabulary found by their text, as llama.cpp finds them
//! (`llama_vocab::impl::load`): end of turn, end of message, fill-in-the-middle tokens, and the
//! set of tokens that end generation.
//!
//! Where the file names an id (`tokenizer.ggml.eot_token_id`, ...), that id wins. A token found
//! by its text becomes a control token (llama.cpp "overrides its type"), so it is matched whole
//! in text and skipped by `decode(.., true)`. Where several texts are present, llama.cpp's pick
//! depends on hash-map order; ours is the first in the lists below (`<|eot_id|>` before
//! `<|im_end|>` before `<|endoftext|>`). The set of end-of-generation ids does not depend on it.

use std::collections::HashMap;

use super::gguf_vocab::{GgufVocab, TokenType};

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Tokens that end generation by their text.
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// What [`detect`] found.
pub(crate) struct Specials {
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    /// Sorted, without repeats.
    pub stop_ids: Vec<u32>,
}

/// Find the special tokens of `v` and mark the ones found by text as control tokens.
pub(crate) fn detect(v: &mut GgufVocab) -> Specials {
    let by_text: HashMap<&str, u32> = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i as u32))
        .collect();
    let first = |texts: &[&str]| texts.iter().find_map(|t| by_text.get(t).copied());
    let mut promote = Vec::new();
    let mut pick = |file: Option<u32>, texts: &[&str]| -> Option<u32> {
        file.or_else(|| {
            let id = first(texts)?;
            promote.push(id);
            Some(id)
        })
    };
    let eot = pick(v.eot, EOT_TEXTS);
    let eom = pick(v.eom, EOM_TEXTS);
    pick(v.fim_pre, FIM_PRE_TEXTS);
    pick(v.fim_suf, FIM_SUF_TEXTS);
    pick(v.fim_mid, FIM_MID_TEXTS);
    let fim_pad = pick(v.fim_pad, FIM_PAD_TEXTS);
    let fim_rep = pick(v.fim_rep, FIM_REP_TEXTS);
    let fim_sep = pick(v.fim_sep, FIM_SEP_TEXTS);

    let mut eog: Vec<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
    for t in EOG_TEXTS {
        if let Some(&id) = by_text.get(t) {
            eog.push(id);
            promote.push(id);
        }
    }
    eog.extend([v.eos, eot, eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    drop(by_text);

    for id in promote {
        let t = &mut v.types[id as usize];
        if *t != TokenType::Control {
            *t = TokenType::Control;
        }
    }

    // gpt-oss (o200k_harmony) and solar-open: `<|end|>` ends a message, not the generation, when
    // `<|return|>`/`<|call|>` (or `<|calls|>`/`<|flush|>`) exist; it is then plain text.
    let has = |eog: &[u32], text: &str| eog.iter().any(|&id| v.tokens[id as usize] == text);
    if ((has(&eog, "<|return|>") && has(&eog, "<|call|>"))
        || (has(&eog, "<|calls|>") && has(&eog, "<|flush|>")))
        && has(&eog, "<|end|>")
    {
        eog.retain(|&id| {
            let keep = v.tokens[id as usize] != "<|end|>";
            if !keep {
                v.types[id as usize] = TokenType::UserDefined;
            }
            keep
        });
    }
    // Gemma 4 and PLaMo have a normal `</s>`.
    if (has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>")) && has(&eog, "</s>") {
        eog.retain(|&id| {
            let keep = v.tokens[id as usize] != "</s>";
            if !keep {
                v.types[id as usize] = TokenType::Normal;
            }
            keep
        });
    }
    Specials {
        eot,
        eom,
        stop_ids: eog,
    }
}

/// The end-of-turn and end-of-generation texts for tokenizers without GGUF metadata
/// (`tokenizer.json`): the same lists.
pub(crate) fn eot_texts() -> &'static [&'static str] {
    EOT_TEXTS
}

pub(crate) fn eom_texts() -> &'static [&'static str] {
    EOM_TEXTS
}
