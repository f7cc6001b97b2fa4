//! [`TextStream`]: incremental decoding that only emits whole UTF-8 characters.

use super::{TextError, Tokenizer};

/// Decodes generated ids one at a time into text, holding back the bytes of a character that is
/// not complete yet (a byte-level BPE token or a `<0xXX>` byte token can carry part of one: an
/// emoji is often split over two to four tokens).
///
/// The pieces are joined as they are: unlike [`Tokenizer::decode`], a SentencePiece stream keeps
/// the leading space of its first piece, since generated text continues a prompt. Bytes that
/// can never form a character become U+FFFD, as in a lossy decode.
///
/// ```ignore
/// let mut stream = TextStream::new(true);
/// for id in generated {
///     print!("{}", stream.push(&tokenizer, id)?);
/// }
/// print!("{}", stream.finish());
/// ```
#[derive(Debug, Clone, Default)]
pub struct TextStream {
    skip_special: bool,
    /// Bytes received but not emitted yet: the start of an unfinished character.
    pending: Vec<u8>,
}

impl TextStream {
    /// A stream; `skip_special` leaves special tokens (`<|im_end|>`, ...) out of the text.
    pub fn new(skip_special: bool) -> Self {
        TextStream {
            skip_special,
            pending: Vec::new(),
        }
    }

    /// Add one token; returns the text it completes (often empty while a character is partial).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, TextError> {
        let bytes = tokenizer.token_bytes(id).ok_or(TextError::IdOutOfRange {
            id,
            vocab_size: tokenizer.vocab_size(),
        })?;
        if self.skip_special && tokenizer.is_special(id) {
            return Ok(String::new());
        }
        Ok(self.push_bytes(bytes))
    }

    /// Add raw bytes; returns every whole character now available.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by `valid_up_to`'s contract.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            rest = after;
                            break;
                        }
                        // Bytes that no continuation can fix.
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// Whether bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// End of the stream: an unfinished character becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `bytes` split at every given cut; return what came out at each step and at the end.
    fn feed(chunks: &[&[u8]]) -> (Vec<String>, String) {
        let mut s = TextStream::new(false);
        let steps = chunks.iter().map(|c| s.push_bytes(c)).collect();
        (steps, s.finish())
    }

    #[test]
    fn emoji_split_over_four_pushes_arrives_whole() {
        let e = "🦙".as_bytes();
        let (steps, end) = feed(&[&e[..1], &e[1..2], &e[2..3], &e[3..]]);
        assert_eq!(steps, ["", "", "", "🦙"]);
        assert_eq!(end, "");
    }

    #[test]
    fn completes_one_and_starts_the_next() {
        let a = "é".as_bytes();
        let b = "漢".as_bytes();
        let mut mid = vec![a[1]];
        mid.extend_from_slice(&b[..2]);
        let (steps, end) = feed(&[b"x", &a[..1], &mid, &b[2..], b"!"]);
        assert_eq!(steps, ["x", "", "é", "漢", "!"]);
        assert_eq!(end, "");
    }

    #[test]
    fn every_split_of_mixed_text_joins_back() {
        let text = "a😶‍🌫️ b\u{7f}é漢字\n🚀";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let (steps, end) = feed(&[&bytes[..cut], &bytes[cut..]]);
            for s in &steps {
                assert!(!s.contains(char::REPLACEMENT_CHARACTER));
            }
            assert_eq!(steps.concat() + &end, text, "cut at {cut}");
        }
        // Byte by byte.
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        let (steps, end) = feed(&chunks);
        assert_eq!(steps.concat() + &end, text);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        // A lone continuation byte, then a lead byte followed by ASCII.
        let (steps, end) = feed(&[b"a\x80b", b"\xE6", b"c"]);
        assert_eq!(steps, ["a\u{FFFD}b", "", "\u{FFFD}c"]);
        assert_eq!(end, "");
        // A character cut off by the end of the stream.
        let (steps, end) = feed(&[b"z\xF0\x9F"]);
        assert_eq!(steps, ["z"]);
        assert_eq!(end, "\u{FFFD}");
    }
}
