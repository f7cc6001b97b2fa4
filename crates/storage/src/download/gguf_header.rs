//! The header check of a GGUF being downloaded ([`HeaderGuard`]): its header parsed with the
//! GGUF reader from the bytes as they stream, then no byte admitted past the end of its tensors
//! (padded to the alignment), and at the end the file's length checked against the tensors.

use std::cell::RefCell;

use super::DownloadError;
use crate::formats::gguf::{GgufError, GgufFile};
use crate::formats::source::{ByteSource, SourceError};

/// The most header bytes kept in memory to parse; a download whose header is longer is
/// refused. The metadata (vocabulary, merges, chat template) and tensor infos of real GGUF
/// files take a few MiB.
const MAX_HEADER: usize = 64 << 20;
/// Bytes past those received that a parse may be shown as zeros: the GGUF reader reads ahead in
/// windows of 1 MiB. Zeros it reads ahead are never decoded when the parse ends within the
/// bytes received, which [`HeaderGuard`] checks before trusting it.
const READ_AHEAD: u64 = 1 << 20;
/// The length a parse is told while the file's is not known.
const UNKNOWN_LEN: u64 = u64::MAX;
/// Received bytes below which the header is parsed again on every chunk (cheap); past it,
/// once a quarter more has arrived (so the parsing work stays a few times the header's size).
const EVERY_CHUNK: usize = 1 << 20;

/// Where a parsed header says the file's bytes end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    /// The end of the last tensor's bytes: the file must hold at least this many.
    tensors_end: u64,
    /// That, padded to the alignment (writers pad the last tensor too): the most it may hold.
    max_len: u64,
    alignment: u64,
}

/// The first bytes of a GGUF being downloaded as a [`ByteSource`] of `len` bytes for the GGUF
/// reader: the bytes received, then up to [`READ_AHEAD`] zeros; a read further on fails
/// (before allocating), as the bytes are not there yet.
struct Head<'a> {
    bytes: &'a [u8],
    len: u64,
}

impl Head<'_> {
    fn check(&self, offset: u64, len: u64) -> Result<(), SourceError> {
        let have = self.bytes.len() as u64;
        match offset.checked_add(len) {
            Some(end) if end <= self.len && end <= have + READ_AHEAD => Ok(()),
            _ => Err(SourceError::OutOfRange {
                what: "the GGUF header received so far".to_string(),
                offset,
                len,
                source_len: have,
            }),
        }
    }
}

impl ByteSource for Head<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.check(offset, buf.len() as u64)?;
        // Within `bytes` + READ_AHEAD: both fit in usize.
        let start = (offset as usize).min(self.bytes.len());
        let real = (self.bytes.len() - start).min(buf.len());
        buf[..real].copy_from_slice(&self.bytes[start..start + real]);
        buf[real..].fill(0);
        Ok(())
    }

    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        self.check(offset, len)?;
        let mut buf = vec![0u8; len as usize];
        self.read_at(offset, &mut buf)?;
        Ok(buf)
    }
}

/// What a parse of the bytes received so far tells.
enum Parsed {
    Header(Extent),
    /// More bytes are needed (or the parse saw bytes not yet received).
    NotYet,
    /// Not a GGUF at all: its first four bytes.
    NotGguf([u8; 4]),
    Bad(String),
}

/// Parse `bytes`, the start of a GGUF file of `len` bytes (`None` while not known), with the
/// GGUF reader. A header is only trusted when it ends within `bytes` (its data section starts
/// at or before their end): then every byte the reader decoded was received.
fn parse_head(bytes: &[u8], len: Option<u64>) -> Parsed {
    let head = Head {
        bytes,
        len: len.unwrap_or(UNKNOWN_LEN),
    };
    match GgufFile::read(&head) {
        // With the whole file (`len` known, nothing shown as zeros), or a header that ends
        // within the bytes received.
        Ok(file) if len.is_some() || file.data_offset <= bytes.len() as u64 => {
            match extent(&file) {
                Some(e) => Parsed::Header(e),
                None => Parsed::Bad("its tensors end past 2^64 bytes".to_string()),
            }
        }
        Ok(_) => Parsed::NotYet,
        // The first 4 and 8 bytes (magic, version) decide these, whatever follows.
        Err(GgufError::BadMagic { found }) if bytes.len() >= 4 => Parsed::NotGguf(found),
        Err(e @ (GgufError::UnsupportedVersion { .. } | GgufError::BigEndian))
            if bytes.len() >= 8 =>
        {
            Parsed::Bad(e.to_string())
        }
        // With the whole file, every error is final; before, bytes still to come may settle it.
        Err(e) if len.is_some() => Parsed::Bad(e.to_string()),
        Err(_) => Parsed::NotYet,
    }
}

/// The extent of a parsed header's tensors (checked arithmetic; `None` past 2^64). A file
/// without tensors may end where its header does, before the data section's alignment.
fn extent(file: &GgufFile) -> Option<Extent> {
    let mut end = 0u64;
    for t in &file.tensors {
        end = end.max(t.offset.checked_add(t.n_bytes)?);
    }
    let tensors_end = match file.tensors.is_empty() {
        true => 0,
        false => file.data_offset.checked_add(end)?,
    };
    let max_len = tensors_end
        .checked_next_multiple_of(file.alignment)?
        .max(file.data_offset);
    Some(Extent {
        tensors_end,
        max_len,
        alignment: file.alignment,
    })
}

/// Watches a GGUF's bytes as they stream (`fetch::Observer::Gguf`): parses its header with the GGUF
/// reader as soon as it has arrived, then refuses every byte past the end of its tensors
/// (padded to the alignment), before it is written. Until the header has arrived, at most a
/// chunk (headers under [`EVERY_CHUNK`]) or a quarter of the header's length more is received.
pub(crate) struct HeaderGuard {
    url: String,
    state: RefCell<GuardState>,
}

#[derive(Default)]
struct GuardState {
    /// The bytes received, until the header is parsed.
    head: Vec<u8>,
    /// Parse again once `head` holds this many bytes.
    next_try: usize,
    extent: Option<Extent>,
}

impl HeaderGuard {
    pub(crate) fn new(url: &str) -> HeaderGuard {
        HeaderGuard {
            url: url.to_string(),
            state: RefCell::new(GuardState::default()),
        }
    }

    fn bad(&self, message: String) -> DownloadError {
        DownloadError::BadGguf {
            url: self.url.clone(),
            message,
        }
    }

    fn refuse(&self, parsed: Parsed) -> DownloadError {
        match parsed {
            Parsed::NotGguf(magic) => DownloadError::NotGguf {
                url: self.url.clone(),
                magic: String::from_utf8_lossy(&magic).into_owned(),
            },
            Parsed::Bad(why) => self.bad(why),
            Parsed::NotYet | Parsed::Header(_) => self.bad("no complete header".to_string()),
        }
    }

    fn past_the_end(&self, e: Extent, end: u64) -> DownloadError {
        self.bad(format!(
            "the body goes on past byte {} (at least {end} bytes), but its header's tensors end \
             at byte {} ({} with padding to the {}-byte alignment)",
            e.max_len, e.tensors_end, e.max_len, e.alignment
        ))
    }

    /// Before bytes ending at `end` are written: refused past the end the header gives.
    pub(crate) fn admit(&self, end: u64) -> Result<(), DownloadError> {
        match self.state.borrow().extent {
            Some(e) if end > e.max_len => Err(self.past_the_end(e, end)),
            _ => Ok(()),
        }
    }

    /// The file's bytes at `offset` (in order from 0, after every [`void`](Self::void)).
    pub(crate) fn bytes(&self, offset: u64, data: &[u8]) -> Result<(), DownloadError> {
        let end = offset.saturating_add(data.len() as u64);
        let mut st = self.state.borrow_mut();
        if let Some(e) = st.extent {
            return match end > e.max_len {
                true => Err(self.past_the_end(e, end)),
                false => Ok(()),
            };
        }
        // Bytes come in order from 0 after every `void`.
        if offset != st.head.len() as u64 {
            return Err(self.bad(format!(
                "internal: bytes at {offset} after {} bytes",
                st.head.len()
            )));
        }
        if st.head.len() + data.len() > MAX_HEADER {
            return Err(self.bad(format!(
                "no complete header in its first {MAX_HEADER} bytes"
            )));
        }
        st.head.extend_from_slice(data);
        if st.head.len() < st.next_try {
            return Ok(());
        }
        match parse_head(&st.head, None) {
            Parsed::Header(e) => {
                st.extent = Some(e);
                st.head = Vec::new();
                if end > e.max_len {
                    return Err(self.past_the_end(e, end));
                }
            }
            Parsed::NotYet => {
                let have = st.head.len();
                st.next_try = if have < EVERY_CHUNK {
                    have + 1
                } else {
                    have + have / 4
                };
            }
            refused => return Err(self.refuse(refused)),
        }
        Ok(())
    }

    /// What was seen is void: the file starts over from byte 0.
    pub(crate) fn void(&self) {
        *self.state.borrow_mut() = GuardState::default();
    }

    /// Whether the header has been parsed.
    pub(crate) fn has_header(&self) -> bool {
        self.state.borrow().extent.is_some()
    }

    /// The file is complete at `len` bytes: its header parsed (with the whole file when it
    /// had not yet) and every tensor inside it.
    pub(crate) fn finish(&self, len: u64) -> Result<(), DownloadError> {
        let mut st = self.state.borrow_mut();
        let e = match st.extent {
            Some(e) => e,
            // Every byte went through `bytes` (in order, from 0, the file no longer than
            // MAX_HEADER), so `head` is the whole file.
            None if st.head.len() as u64 != len => {
                return Err(self.bad(format!(
                    "internal: {len} bytes stored, {} seen",
                    st.head.len()
                )))
            }
            None => match parse_head(&st.head, Some(len)) {
                Parsed::Header(e) => e,
                refused => return Err(self.refuse(refused)),
            },
        };
        st.extent = Some(e);
        if len < e.tensors_end {
            return Err(self.bad(format!(
                "{len} bytes, but its header's tensors end at byte {}",
                e.tensors_end
            )));
        }
        if len > e.max_len {
            return Err(self.past_the_end(e, len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gguf::{GgufWriter, Value};
    use tritium_core::quant::GgmlType;

    /// A GGUF with a `meta` bytes string in its metadata and two I8 tensors of `a` and `b`
    /// bytes, aligned to 64; the last tensor is not padded.
    fn gguf(meta: usize, a: usize, b: usize) -> Vec<u8> {
        let mut w = GgufWriter::new().alignment(64).unwrap();
        w.add("general.architecture", Value::String("llama".into()))
            .unwrap();
        w.add("x.text", Value::String("m".repeat(meta))).unwrap();
        let bytes = |n: usize, seed: u8| -> Vec<u8> {
            (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
        };
        w.add_tensor("a", GgmlType::I8, &[a as u64], bytes(a, 1))
            .unwrap();
        w.add_tensor("b", GgmlType::I8, &[b as u64], bytes(b, 2))
            .unwrap();
        w.to_bytes().unwrap()
    }

    /// Feed `file` to a guard in chunks of `chunk` bytes, each admitted first, then finish:
    /// the first error, and the bytes admitted before it.
    fn stream(file: &[u8], chunk: usize) -> (Result<(), DownloadError>, u64, HeaderGuard) {
        let g = HeaderGuard::new("http://h/x.gguf");
        let mut at = 0u64;
        for piece in file.chunks(chunk) {
            let end = at + piece.len() as u64;
            if let Err(e) = g.admit(end).and_then(|()| g.bytes(at, piece)) {
                return (Err(e), at, g);
            }
            at = end;
        }
        let r = g.finish(at);
        (r, at, g)
    }

    #[test]
    fn a_whole_gguf_passes_in_any_chunking() {
        for (meta, chunk) in [
            (10, 1),
            (10, 7),
            (3000, 100),
            (3 << 20, 16 << 10),
            (10, 1 << 20),
        ] {
            let file = gguf(meta, 1000, 300);
            let full = GgufFile::read(&file).unwrap();
            let (r, len, g) = stream(&file, chunk);
            assert!(r.is_ok(), "meta {meta}, chunk {chunk}: {r:?}");
            assert_eq!(len, file.len() as u64);
            // The extent found while streaming is the whole file's.
            let e = g.state.borrow().extent.unwrap();
            assert_eq!(e, extent(&full).unwrap());
            assert_eq!(e.tensors_end, file.len() as u64);
            // Padding the last tensor to the alignment is allowed; a byte more is not.
            let mut padded = file.clone();
            padded.resize(file.len().next_multiple_of(64), 0);
            assert!(stream(&padded, chunk).0.is_ok());
        }
    }

    /// A valid header followed by far more bytes than its tensors take (a server sending zeros
    /// without a Content-Length): refused once the header has arrived, before the first byte
    /// past the aligned end of the tensors is admitted.
    #[test]
    fn bytes_past_the_tensors_are_refused_before_they_are_written() {
        let file = gguf(10, 1000, 300);
        let max = (file.len() as u64).next_multiple_of(64);
        let mut long = file.clone();
        long.resize(file.len() + (4 << 20), 0);
        for chunk in [1, 100, 16 << 10] {
            let (r, admitted, _) = stream(&long, chunk);
            let err = r.unwrap_err();
            assert!(
                matches!(&err, DownloadError::BadGguf { message, .. }
                    if message.contains(&format!("past byte {max}"))),
                "{err}"
            );
            // The header parses within the first chunk that completes it: nothing past the
            // end is admitted, except within the chunk the header was completed by.
            assert!(
                admitted <= max.max(chunk as u64),
                "chunk {chunk}: {admitted}"
            );
        }
    }

    #[test]
    fn a_file_that_ends_early_or_is_not_a_gguf_is_refused() {
        let file = gguf(10, 1000, 300);
        let (r, ..) = stream(&file[..file.len() - 1], 4096);
        let err = r.unwrap_err();
        assert!(err.to_string().contains("tensors end at byte"), "{err}");
        // Cut inside the header.
        let (r, ..) = stream(&file[..40], 4096);
        assert!(matches!(r, Err(DownloadError::BadGguf { .. })), "{r:?}");
        let (r, ..) = stream(b"<html>not found</html>", 4096);
        assert!(
            matches!(&r, Err(DownloadError::NotGguf { magic, .. }) if magic == "<htm"),
            "{r:?}"
        );
        let mut zeros = b"GGUF".to_vec();
        zeros.resize(1 << 20, 0);
        let (r, ..) = stream(&zeros, 16 << 10);
        assert!(matches!(r, Err(DownloadError::BadGguf { .. })), "{r:?}");
        // A restart (void) starts the header over.
        let g = HeaderGuard::new("u");
        g.bytes(0, &file[..100]).unwrap();
        g.void();
        g.bytes(0, &file).unwrap();
        g.finish(file.len() as u64).unwrap();
    }

    /// The reader's view of the bytes so far never allocates for what is not there: a header
    /// that claims an array of 2^40 strings is "not yet", then refused at the end.
    #[test]
    fn a_header_claiming_more_than_it_holds_allocates_nothing() {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes()); // tensors
        b.extend_from_slice(&1u64.to_le_bytes()); // metadata
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&9u32.to_le_bytes()); // array
        b.extend_from_slice(&8u32.to_le_bytes()); // of strings
        b.extend_from_slice(&(1u64 << 40).to_le_bytes());
        b.resize(b.len() + 4096, b'z');
        let (r, ..) = stream(&b, 1000);
        assert!(matches!(r, Err(DownloadError::BadGguf { .. })), "{r:?}");
    }
}
