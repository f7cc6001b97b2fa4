//! [`StopStream`]: generated text released as it is decoded ([`TextStream`]: whole UTF-8
//! characters only), holding back what could be the start of a stop string, and ending at the
//! first stop string (which is not part of the text). The CLI, the server and the browser
//! package share it, with [`encode_chat`].

use super::{TextError, TextStream, Tokenizer};

/// Detokenizes a generation with stop strings.
#[derive(Debug, Clone)]
pub struct StopStream {
    stream: TextStream,
    stop: Vec<String>,
    /// Text produced and not yet released.
    pending: String,
    /// Everything released so far.
    pub text: String,
}

impl StopStream {
    /// A stream that ends at any of `stop` (empty strings are ignored) and leaves special
    /// tokens out of the text.
    pub fn new(stop: &[String]) -> Self {
        StopStream {
            stream: TextStream::new(true),
            stop: stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            text: String::new(),
        }
    }

    /// Add a token; returns the text that can be shown now and whether a stop string was hit
    /// (the text then ends before it).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<(String, bool), TextError> {
        let piece = self.stream.push(tok, id)?;
        Ok(self.push_text(&piece))
    }

    /// [`StopStream::push`] for decoded text.
    pub fn push_text(&mut self, piece: &str) -> (String, bool) {
        self.pending.push_str(piece);
        if let Some(at) = self
            .stop
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let out = self.pending[..at].to_string();
            self.text.push_str(&out);
            self.pending.clear();
            return (out, true);
        }
        // Keep back the longest suffix that is a prefix of some stop string.
        let keep = self
            .stop
            .iter()
            .map(|s| {
                (1..s.len().min(self.pending.len() + 1))
                    .rev()
                    .find(|&n| {
                        self.pending.is_char_boundary(self.pending.len() - n)
                            && s.is_char_boundary(n)
                            && self.pending.ends_with(&s[..n])
                    })
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let cut = self.pending.len() - keep;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        self.text.push_str(&out);
        (out, false)
    }

    /// The text held back, at the end of the generation.
    pub fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.pending);
        out.push_str(&self.stream.finish());
        self.text.push_str(&out);
        out
    }
}

/// Tokenize a rendered chat: BOS is added only when the template did not write it.
pub fn encode_chat(tok: &Tokenizer, rendered: &str) -> Result<Vec<u32>, TextError> {
    let bos_text = tok.bos().and_then(|b| tok.id_to_token(b));
    let has_bos = bos_text.is_some_and(|b| !b.is_empty() && rendered.starts_with(&b));
    tok.encode(rendered, !has_bos)
}

#[cfg(test)]
mod tests {
    use super::StopStream;

    #[test]
    fn holds_back_a_possible_stop_string_and_cuts_at_it() {
        let mut s = StopStream::new(&["END".to_string(), String::new()]);
        assert_eq!(s.push_text("hello E"), ("hello ".to_string(), false));
        assert_eq!(s.push_text("N"), (String::new(), false));
        assert_eq!(s.push_text("D tail"), (String::new(), true));
        assert_eq!(s.text, "hello ");
    }

    #[test]
    fn releases_held_text_that_is_not_a_stop_string() {
        let mut s = StopStream::new(&["ab".to_string()]);
        assert_eq!(s.push_text("xa"), ("x".to_string(), false));
        assert_eq!(s.push_text("c"), ("ac".to_string(), false));
        assert_eq!(s.push_text("é a"), ("é ".to_string(), false));
        assert_eq!(s.finish(), "a");
        assert_eq!(s.text, "xacé a");
    }
}
