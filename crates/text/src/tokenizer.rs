//! [`Tokenizer`]: the `tokenizers` crate, set up from GGUF metadata or a `tokenizer.json`.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

use crate::formats::gguf::GgufFile;

use super::gguf_vocab::{GgufVocab, TokenType, VocabModel};
use super::{pretok, specials, spm, TextError};

/// Where a tokenizer came from, which fixes how its tokens map to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// GGUF `gpt2`: byte-level BPE (GPT-2's byte-to-character map).
    GgufBpe,
    /// GGUF `llama`: SentencePiece with `<0xXX>` byte fallback and `▁` for spaces.
    GgufSpm,
    /// A `tokenizer.json`.
    Json,
}

/// How a token's text maps to the bytes it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PieceScheme {
    /// GPT-2's byte-to-character map; a token with a character outside it is literal text.
    ByteLevel,
    /// `▁` is a space, `<0xXX>` is one byte.
    SentencePiece,
    /// The token's text is its bytes.
    Plain,
}

/// A tokenizer: text to token ids and back, plus the model's special ids.
///
/// Encoding matches special and user-defined tokens written in the text (`<|im_start|>` becomes
/// one id), as llama.cpp does with `parse_special` and as transformers always does.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    kind: TokenizerKind,
    /// Concatenated bytes of every token, `piece_start[id]..piece_start[id + 1]`.
    piece_bytes: Vec<u8>,
    piece_start: Vec<usize>,
    /// Special tokens (skipped by `decode(.., true)`).
    special: Vec<bool>,
    /// Tokens matched whole in text (special and user-defined): their bytes are their text.
    added: Vec<bool>,
    /// SentencePiece with `add_space_prefix`: `decode` drops the text's first leading space.
    strip_leading_space: bool,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    stop_ids: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eot", &self.eot)
            .field("add_bos", &self.add_bos)
            .field("stop_ids", &self.stop_ids)
            .finish()
    }
}

impl Tokenizer {
    /// Build the tokenizer a GGUF file describes (`tokenizer.ggml.*`).
    ///
    /// - `gpt2`: byte-level BPE with the merges and the pre-tokenizer named by
    ///   `tokenizer.ggml.pre` ([`super::KNOWN_PRE_TOKENIZERS`]; an unknown name is an error, as in
    ///   llama.cpp). A file without the key gets llama.cpp's `default` regexes, except a Llama 3
    ///   vocabulary (`<|begin_of_text|>` at id 128000, as in BitNet b1.58 2B4T's GGUF, which
    ///   lacks the key), which gets `llama3`: the pre-tokenizer that vocabulary was trained with.
    /// - `llama`: SentencePiece. Merges come from the piece scores, unknown characters fall back
    ///   to `<0xXX>` byte pieces, spaces become `▁`, and a `▁` is prepended to the text
    ///   (`tokenizer.ggml.add_space_prefix`, default true).
    ///
    /// Control and unknown tokens become special tokens; user-defined tokens are matched whole
    /// in text but decode as text. BOS/EOS/EOT/EOM ids and `add_bos_token`/`add_eos_token`
    /// follow llama.cpp's reading and defaults.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer, TextError> {
        Self::from_vocab(GgufVocab::read(gguf)?)
    }

    fn from_vocab(mut v: GgufVocab) -> Result<Tokenizer, TextError> {
        let n = v.tokens.len();
        let found = specials::detect(&mut v);
        let mut vocab: Vocab = Vocab::default();
        vocab.reserve(n);
        for (i, t) in v.tokens.iter().enumerate() {
            if vocab.insert(t.clone(), i as u32).is_some() {
                // llama.cpp asserts on this too: a token text must name one id.
                return Err(TextError::metadata(
                    "tokenizer.ggml.tokens",
                    format!("token {t:?} appears twice"),
                ));
            }
        }

        let strip_leading_space = v.model == VocabModel::Spm && v.add_space_prefix.unwrap_or(true);
        let (mut inner, kind, add_bos_default) = match v.model {
            VocabModel::Bpe => {
                let pre = match v.pre.as_deref() {
                    Some(name) => pretok::lookup(name)
                        .ok_or_else(|| TextError::UnknownPreTokenizer(name.to_string()))?,
                    None if is_llama3_vocab(&v.tokens) => pretok::lookup("llama3")
                        .ok_or_else(|| TextError::UnknownPreTokenizer("llama3".into()))?,
                    None => pretok::lookup("default")
                        .ok_or_else(|| TextError::UnknownPreTokenizer("default".into()))?,
                };
                let merges = bpe_merges(&v.merges, &vocab);
                let model = BPE::builder()
                    .vocab_and_merges(vocab, merges)
                    .ignore_merges(pre.ignore_merges)
                    .build()
                    .map_err(TextError::tokenizers)?;
                let mut inner = tokenizers::Tokenizer::new(model);
                let mut steps = Vec::with_capacity(pre.regexes.len() + 1);
                for re in pre.regexes {
                    let split = Split::new(
                        SplitPattern::Regex(re.to_string()),
                        SplitDelimiterBehavior::Isolated,
                        false,
                    )
                    .map_err(TextError::tokenizers)?;
                    steps.push(PreTokenizerWrapper::Split(split));
                }
                steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
                    false, false, false,
                )));
                inner.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(PreSequence::new(
                    steps,
                ))));
                inner.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::new(
                    false, false, false,
                ))));
                (inner, TokenizerKind::GgufBpe, pre.add_bos)
            }
            VocabModel::Spm => {
                let merges = spm::merges_from_scores(&v.tokens, &v.scores, &v.types);
                let mut builder = BPE::builder()
                    .vocab_and_merges(vocab, merges)
                    .byte_fallback(true)
                    .fuse_unk(true);
                if let Some(unk) = v.unk {
                    builder = builder.unk_token(v.tokens[unk as usize].clone());
                }
                let model = builder.build().map_err(TextError::tokenizers)?;
                let mut inner = tokenizers::Tokenizer::new(model);
                let add_space_prefix = v.add_space_prefix.unwrap_or(true);
                let mut norm = Vec::new();
                if add_space_prefix {
                    norm.push(NormalizerWrapper::Prepend(Prepend::new("▁".into())));
                }
                norm.push(NormalizerWrapper::Replace(
                    Replace::new(" ", "▁").map_err(TextError::tokenizers)?,
                ));
                inner
                    .with_normalizer(Some(NormalizerWrapper::Sequence(NormalizerSequence::new(
                        norm,
                    ))))
                    .map_err(TextError::tokenizers)?;
                let mut dec = vec![
                    DecoderWrapper::Replace(Replace::new("▁", " ").map_err(TextError::tokenizers)?),
                    DecoderWrapper::ByteFallback(ByteFallback::new()),
                    DecoderWrapper::Fuse(Fuse::new()),
                ];
                if add_space_prefix {
                    dec.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
                }
                inner.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(dec))));
                (inner, TokenizerKind::GgufSpm, true)
            }
        };

        // Special (control, unknown) and user-defined tokens, matched whole in the input text.
        let mut added_tokens = Vec::new();
        let mut special = vec![false; n];
        let mut added = vec![false; n];
        for (i, t) in v.types.iter().enumerate() {
            match t {
                TokenType::Control | TokenType::Unknown => {
                    special[i] = true;
                    added[i] = true;
                    added_tokens
                        .push(AddedToken::from(v.tokens[i].clone(), true).normalized(false));
                }
                TokenType::UserDefined => {
                    added[i] = true;
                    added_tokens
                        .push(AddedToken::from(v.tokens[i].clone(), false).normalized(false));
                }
                _ => {}
            }
        }
        inner
            .add_tokens(added_tokens)
            .map_err(TextError::tokenizers)?;

        let scheme = match kind {
            TokenizerKind::GgufSpm => PieceScheme::SentencePiece,
            _ => PieceScheme::ByteLevel,
        };
        let mut tok = Tokenizer {
            inner,
            kind,
            piece_bytes: Vec::new(),
            piece_start: Vec::new(),
            special,
            added,
            strip_leading_space,
            bos: v.bos,
            eos: v.eos,
            eot: found.eot,
            eom: found.eom,
            pad: v.pad,
            add_bos: v.add_bos.unwrap_or(add_bos_default),
            add_eos: v.add_eos.unwrap_or(false),
            stop_ids: found.stop_ids,
        };
        tok.build_pieces(scheme, |id| v.tokens.get(id as usize).cloned());
        Ok(tok)
    }

    /// Load a `tokenizer.json` (the `tokenizers` format). Encoding with `add_special` runs the
    /// file's own post-processor (which may add BOS); BOS, EOS, EOT and EOM are found among the
    /// special tokens by their usual texts (`<|begin_of_text|>`, `<s>`, `<|end_of_text|>`,
    /// `</s>`, `<|eot_id|>`, `<|im_end|>`, ...).
    pub fn from_json(json: &[u8]) -> Result<Tokenizer, TextError> {
        let inner = tokenizers::Tokenizer::from_bytes(json).map_err(TextError::tokenizers)?;
        let n = inner.get_vocab_size(true);
        let added = inner.get_added_tokens_decoder();
        // Ids can have holes; the table covers up to the largest id.
        let size = added
            .keys()
            .map(|&id| id as usize + 1)
            .chain(std::iter::once(inner.get_vocab_size(false)))
            .max()
            .unwrap_or(n);
        let mut special = vec![false; size];
        let mut is_added = vec![false; size];
        for (&id, t) in &added {
            is_added[id as usize] = true;
            if t.special {
                special[id as usize] = true;
            }
        }
        let special_id = |texts: &[&str]| -> Option<u32> {
            texts.iter().find_map(|t| {
                let id = inner.token_to_id(t)?;
                special
                    .get(id as usize)
                    .copied()
                    .unwrap_or(false)
                    .then_some(id)
            })
        };
        let bos = special_id(&["<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"]);
        let eos = special_id(&["<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"]);
        let eot = special_id(specials::eot_texts());
        let eom = special_id(specials::eom_texts());
        let pad = special_id(&["<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>"]);
        let mut stop_ids: Vec<u32> = specials::EOG_TEXTS
            .iter()
            .filter_map(|t| special_id(&[t]))
            .collect();
        stop_ids.extend([eos, eot, eom].into_iter().flatten());
        stop_ids.sort_unstable();
        stop_ids.dedup();

        // What the post-processor adds, seen on an empty text.
        let probe = inner.encode_fast("", true).map_err(TextError::tokenizers)?;
        let add_bos = bos.is_some() && probe.get_ids().first().copied() == bos;
        let add_eos = eos.is_some() && probe.get_ids().last().copied() == eos;

        let scheme = json_scheme(inner.get_decoder());
        let mut tok = Tokenizer {
            inner,
            kind: TokenizerKind::Json,
            piece_bytes: Vec::new(),
            piece_start: Vec::new(),
            special,
            added: is_added,
            strip_leading_space: false,
            bos,
            eos,
            eot,
            eom,
            pad,
            add_bos,
            add_eos,
            stop_ids,
        };
        let names: Vec<Option<String>> = (0..size as u32)
            .map(|id| tok.inner.id_to_token(id))
            .collect();
        tok.build_pieces(scheme, |id| names.get(id as usize).cloned().flatten());
        Ok(tok)
    }

    /// Fill the per-token byte table used by [`super::TextStream`].
    fn build_pieces(&mut self, scheme: PieceScheme, text_of: impl Fn(u32) -> Option<String>) {
        let n = self.special.len();
        self.piece_start = Vec::with_capacity(n + 1);
        self.piece_bytes = Vec::with_capacity(n * 6);
        let table = byte_level_decode_table();
        for id in 0..n as u32 {
            self.piece_start.push(self.piece_bytes.len());
            let Some(text) = text_of(id) else { continue };
            if self.added[id as usize] {
                // As llama.cpp renders special and user-defined tokens: their text as is.
                self.piece_bytes.extend(text.as_bytes());
                continue;
            }
            match scheme {
                PieceScheme::ByteLevel => {
                    let mapped: Option<Vec<u8>> = text
                        .chars()
                        .map(|c| table.get(c as usize).copied().flatten())
                        .collect();
                    match mapped {
                        Some(b) => self.piece_bytes.extend(b),
                        None => self.piece_bytes.extend(text.as_bytes()),
                    }
                }
                PieceScheme::SentencePiece => match byte_piece(&text) {
                    Some(b) => self.piece_bytes.push(b),
                    None => self.piece_bytes.extend(text.replace('▁', " ").as_bytes()),
                },
                PieceScheme::Plain => self.piece_bytes.extend(text.as_bytes()),
            }
        }
        self.piece_start.push(self.piece_bytes.len());
    }

    /// Text to ids. With `add_special`, BOS (EOS) is added when the model says so
    /// (`add_bos_token` / `add_eos_token`; for a `tokenizer.json`, its post-processor).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TextError> {
        match self.kind {
            TokenizerKind::Json => {
                let enc = self
                    .inner
                    .encode_fast(text, add_special)
                    .map_err(TextError::tokenizers)?;
                Ok(enc.get_ids().to_vec())
            }
            TokenizerKind::GgufBpe | TokenizerKind::GgufSpm => {
                let enc = self
                    .inner
                    .encode_fast(text, false)
                    .map_err(TextError::tokenizers)?;
                let mut ids = Vec::with_capacity(enc.len() + 2);
                if add_special && self.add_bos {
                    ids.extend(self.bos);
                }
                ids.extend_from_slice(enc.get_ids());
                if add_special && self.add_eos {
                    ids.extend(self.eos);
                }
                Ok(ids)
            }
        }
    }

    /// Ids to text. `skip_special` leaves out special tokens; bytes that are not valid UTF-8
    /// become U+FFFD.
    ///
    /// GGUF tokenizers join the tokens' bytes ([`Tokenizer::token_bytes`], what llama.cpp's
    /// `token_to_piece` gives), and SentencePiece drops the text's first leading space (the one
    /// `encode` prepends), as transformers' decoder and llama.cpp's `detokenize` do. A
    /// `tokenizer.json` decodes with its own decoder.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TextError> {
        self.check_ids(ids)?;
        if self.kind == TokenizerKind::Json {
            return self
                .inner
                .decode(ids, skip_special)
                .map_err(TextError::tokenizers);
        }
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if skip_special && self.is_special(id) {
                continue;
            }
            bytes.extend_from_slice(self.token_bytes(id).unwrap_or_default());
        }
        let start = usize::from(self.strip_leading_space && bytes.first() == Some(&b' '));
        Ok(String::from_utf8_lossy(&bytes[start..]).into_owned())
    }

    pub(crate) fn check_ids(&self, ids: &[u32]) -> Result<(), TextError> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size()) {
            Some(&id) => Err(TextError::IdOutOfRange {
                id,
                vocab_size: self.vocab_size(),
            }),
            None => Ok(()),
        }
    }

    /// The bytes token `id` stands for (a special token: its text), or `None` out of range.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let (&a, &b) = (self.piece_start.get(i)?, self.piece_start.get(i + 1)?);
        Some(&self.piece_bytes[a..b])
    }

    /// The token's text as the vocabulary stores it (`Ġthe`, `▁the`, `<0x0A>`, `<s>`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary entry, by its stored text.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Whether `id` is a special (control) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// Number of token ids (the largest id plus one).
    pub fn vocab_size(&self) -> usize {
        self.special.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// End of turn (`<|eot_id|>`, `<|im_end|>`, ...).
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// End of message (`<|eom_id|>`, Llama 3.1 tool calls).
    pub fn eom(&self) -> Option<u32> {
        self.eom
    }

    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// Whether `encode(.., true)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., true)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Ids that end generation, sorted: EOS, EOT, EOM and every token llama.cpp treats as end
    /// of generation by its text (`<|eot_id|>`, `<|im_end|>`, `<|endoftext|>`, `</s>`, ...).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// GGUF merges ("left right", split at the first space after the first byte, as llama.cpp does)
/// as pairs. A repeated pair keeps its first rank (llama.cpp's `emplace`); a merge whose parts or
/// result are not in the vocabulary can never apply and is dropped (the `tokenizers` crate would
/// refuse the whole list).
fn bpe_merges(merges: &[String], vocab: &Vocab) -> Vec<(String, String)> {
    let mut seen = std::collections::HashSet::with_capacity(merges.len());
    let mut out = Vec::with_capacity(merges.len());
    for m in merges {
        // Bytes, not chars: a space is never inside a multi-byte character.
        let Some(pos) = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
            continue;
        };
        let (l, r) = (&m[..pos], &m[pos + 1..]);
        if !vocab.contains_key(l) || !vocab.contains_key(r) {
            continue;
        }
        if !vocab.contains_key(&format!("{l}{r}")) {
            continue;
        }
        if seen.insert((l, r)) {
            out.push((l.to_string(), r.to_string()));
        }
    }
    out
}

/// A Llama 3 vocabulary (BitNet b1.58 2B4T's GGUF has one without `tokenizer.ggml.pre`).
fn is_llama3_vocab(tokens: &[String]) -> bool {
    tokens.get(128000).map(String::as_str) == Some("<|begin_of_text|>")
}

/// `<0xXX>` to the byte.
fn byte_piece(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// GPT-2's byte-level map inverted: character code (below 324) to byte.
fn byte_level_decode_table() -> Vec<Option<u8>> {
    let mut table = vec![None; 324];
    let mut extra = 0usize;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            b as usize
        } else {
            extra += 1;
            255 + extra
        };
        table[c] = Some(b);
    }
    table
}

/// How a `tokenizer.json`'s decoder maps tokens to bytes.
fn json_scheme(decoder: Option<&DecoderWrapper>) -> PieceScheme {
    fn has(d: &DecoderWrapper, f: &dyn Fn(&DecoderWrapper) -> bool) -> bool {
        match d {
            DecoderWrapper::Sequence(s) => s.get_decoders().iter().any(|x| has(x, f)),
            other => f(other),
        }
    }
    match decoder {
        Some(d) if has(d, &|x| matches!(x, DecoderWrapper::ByteLevel(_))) => PieceScheme::ByteLevel,
        Some(d)
            if has(d, &|x| {
                matches!(
                    x,
                    DecoderWrapper::ByteFallback(_) | DecoderWrapper::Metaspace(_)
                )
            }) =>
        {
            PieceScheme::SentencePiece
        }
        _ => PieceScheme::Plain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_table_is_gpt2s() {
        let t = byte_level_decode_table();
        assert_eq!(t['Ġ' as usize], Some(b' '));
        assert_eq!(t['Ċ' as usize], Some(b'\n'));
        assert_eq!(t['ĉ' as usize], Some(b'\t'));
        assert_eq!(t['!' as usize], Some(b'!'));
        assert_eq!(t[' ' as usize], None);
        assert_eq!(t.iter().flatten().count(), 256);
    }

    #[test]
    fn byte_pieces() {
        assert_eq!(byte_piece("<0x0A>"), Some(10));
        assert_eq!(byte_piece("<0xF0>"), Some(0xF0));
        assert_eq!(byte_piece("<0x0>"), None);
        assert_eq!(byte_piece("0x0A"), None);
    }

    #[test]
    fn every_pre_tokenizer_regex_compiles() {
        for name in super::super::KNOWN_PRE_TOKENIZERS {
            let pre = pretok::lookup(name).expect("known");
            for re in pre.regexes {
                Split::new(
                    SplitPattern::Regex(re.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{name}: {re}: {e}"));
            }
        }
    }
}
