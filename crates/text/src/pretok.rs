//! Pre-tokenizer regexes of byte-level BPE vocabularies, by `tokenizer.ggml.pre` name.
//!
//! The names and the grouping of names follow llama.cpp (`llama-vocab.cpp`); the regexes are the
//! ones the models' own `tokenizer.json` files use (llama.cpp rewrites `(?i:'s|...)` because its
//! regex engine lacks inline flags; ours has them). Each regex splits the text with the
//! "isolated" behaviour: matches and the text between them both become pieces, and the regexes
//! of one entry apply one after the other, as in llama.cpp's `unicode_regex_split`.

/// GPT-2's regex (also the one `ByteLevel(use_regex = true)` uses).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3 (`tokenizer.json` of Meta-Llama-3).
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 (like Llama 3 but one digit at a time).
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// One pre-tokenizer: its regexes and the flags llama.cpp ties to the name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PreTokenizer {
    pub regexes: &'static [&'static str],
    /// A piece that is a whole vocabulary entry is taken as is, without merges (Llama 3).
    pub ignore_merges: bool,
    /// Add BOS when the file does not say (`tokenizer.ggml.add_bos_token` absent).
    pub add_bos: bool,
}

const fn pre(regexes: &'static [&'static str]) -> PreTokenizer {
    PreTokenizer {
        regexes,
        ignore_merges: false,
        add_bos: false,
    }
}

/// (names, pre-tokenizer): the `tokenizer.ggml.pre` values we know, grouped as llama.cpp does.
const TABLE: &[(&[&str], PreTokenizer)] = &[
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        PreTokenizer {
            regexes: &[LLAMA3],
            ignore_merges: true,
            add_bos: true,
        },
    ),
    (&["dbrx", "smaug-bpe"], pre(&[LLAMA3])),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
            "trillion",
            "granite-docling",
        ],
        pre(&[GPT2]),
    ),
    (
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        // HF: Digits(individual_digits) then the GPT-2 regex.
        pre(&[r"\p{N}", GPT2]),
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "stablelm2",
            "megrez",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        pre(&[QWEN2]),
    ),
    (&["qwen35"], pre(&[QWEN35])),
    (
        &["chatglm-bpe"],
        pre(&[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ]),
    ),
    (
        &["glm4", "glm5"],
        PreTokenizer {
            regexes: &[LLAMA3],
            ignore_merges: true,
            add_bos: false,
        },
    ),
    (
        &["falcon"],
        pre(&[
            r"[\p{P}\$\+<=>\^~\|`]+",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
            r"[0-9][0-9][0-9]",
        ]),
    ),
    (
        &["deepseek-coder"],
        pre(&[
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            r"[一-龥ࠀ-一가-퟿]+",
            r"\p{N}",
        ]),
    ),
    (
        &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        pre(&[
            r"\p{N}{1,3}",
            r"[一-龥぀-ゟ゠-ヿ]+",
            r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
        ]),
    ),
    (&["poro-chat", "bloom", "gpt3-finnish"], pre(&[BLOOM])),
    (&["viking"], pre(&[BLOOM, r"\p{N}"])),
    (
        &["tekken"],
        PreTokenizer {
            regexes: &[TEKKEN],
            ignore_merges: true,
            add_bos: true,
        },
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        pre(&[GPT4O]),
    ),
    (&["seed-coder"], pre(&[SEED_CODER])),
    (
        &["minicpm5"],
        PreTokenizer {
            regexes: &[
                r"\p{N}{1,3}",
                r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ],
            ignore_merges: true,
            add_bos: false,
        },
    ),
    (
        // llama.cpp's fallback for files without a pre-tokenizer name.
        &["default"],
        pre(&[
            r"[\p{P}\$\+<=>\^~\|]+",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
            r"\p{N}+",
            r"[0-9][0-9][0-9]",
        ]),
    ),
];

/// Every `tokenizer.ggml.pre` name the GGUF tokenizer accepts.
pub const KNOWN_PRE_TOKENIZERS: &[&str] = &[
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "dbrx",
    "smaug-bpe",
    "gpt-2",
    "phi-2",
    "jina-es",
    "jina-de",
    "gigachat",
    "jina-v2-es",
    "jina-v2-de",
    "a.x-4.0",
    "mellum",
    "modern-bert",
    "jina-v1-en",
    "jina-v2-code",
    "roberta-bpe",
    "mpt",
    "olmo",
    "jais",
    "exaone4",
    "trillion",
    "granite-docling",
    "starcoder",
    "refact",
    "command-r",
    "smollm",
    "codeshell",
    "exaone",
    "minerva-7b",
    "mellum2",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "stablelm2",
    "megrez",
    "hunyuan",
    "solar-open",
    "grok-2",
    "qwen35",
    "chatglm-bpe",
    "glm4",
    "glm5",
    "falcon",
    "deepseek-coder",
    "deepseek-v3",
    "hunyuan-dense",
    "joyai-llm",
    "hy_v4",
    "poro-chat",
    "bloom",
    "gpt3-finnish",
    "viking",
    "tekken",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
    "minimax-m2",
    "seed-coder",
    "minicpm5",
    "default",
];

/// The pre-tokenizer of a `tokenizer.ggml.pre` name; `None` for a name we do not know (the
/// caller reports it: llama.cpp refuses such files too).
pub(crate) fn lookup(name: &str) -> Option<PreTokenizer> {
    TABLE
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_match_the_table() {
        let mut from_table: Vec<&str> = TABLE.iter().flat_map(|(n, _)| n.iter().copied()).collect();
        let mut known = KNOWN_PRE_TOKENIZERS.to_vec();
        from_table.sort_unstable();
        known.sort_unstable();
        assert_eq!(from_table, known);
        for name in KNOWN_PRE_TOKENIZERS {
            assert!(lookup(name).is_some(), "{name}");
        }
        assert!(lookup("no-such-pre").is_none());
    }
}
