//! The `Range` request header as a server reads it (RFC 9110 §14.1, §14.2): the downloader's
//! counterpart, [`parse_content_range`](super::parse_content_range), reads the answer.
//!
//! Pure functions of the header text and the representation's length, so they can be tested
//! and fuzzed without a server.
//!
//! Syntax (`Range: bytes=<range-set>`):
//! - The unit is compared case-insensitively; any unit other than `bytes` is one this server
//!   does not understand.
//! - The range set is a list (RFC 9110 §5.6.1): elements separated by commas, optional spaces or
//!   tabs around each element, empty elements ignored, at least one element required.
//! - An element is `first-last`, `first-` or `-suffix`, each number one or more ASCII digits
//!   (no sign, no spaces inside the element). `first-last` with `last < first` is invalid.
//! - Numbers too large for a `u64` are valid syntax: they saturate at `u64::MAX`, which lies
//!   past the end of any representation (so an enormous `last` means "to the end" and an
//!   enormous `first` is unsatisfiable), and `last < first` is decided on the digits
//!   themselves, not on the saturated values.
//!
//! A header with any invalid element is invalid as a whole; a server ignores it (§14.2).

use std::cmp::Ordering;

/// One element of a `bytes` range set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRangeSpec {
    /// `first-last` (inclusive) or, with `last: None`, `first-`: from `first` to the end.
    FromTo { first: u64, last: Option<u64> },
    /// `-n`: the last `n` bytes.
    Suffix(u64),
}

impl ByteRangeSpec {
    /// The inclusive span `(first, last)` this element selects from a representation of `len`
    /// bytes, or `None` when it selects nothing (RFC 9110 §14.1.1): `first` at or past the end,
    /// a zero-length suffix, or any element of an empty representation (whose bytes no
    /// `Content-Range` can name).
    pub fn resolve(self, len: u64) -> Option<(u64, u64)> {
        let end = len.checked_sub(1)?;
        match self {
            ByteRangeSpec::FromTo { first, last } => {
                (first < len).then(|| (first, last.map_or(end, |last| last.min(end))))
            }
            ByteRangeSpec::Suffix(0) => None,
            ByteRangeSpec::Suffix(n) => Some((len - n.min(len), end)),
        }
    }
}

/// How a server answers a `Range` header for a representation of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeResponse {
    /// `200` with the whole representation: the header is ignored.
    Full,
    /// `206` with bytes `first..=last` and `Content-Range: bytes first-last/len`.
    Partial { first: u64, last: u64 },
    /// `416` with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// The answer to `Range: <value>` for a representation of `len` bytes:
///
/// - Not a valid `bytes` range set (another unit, or invalid syntax): [`RangeResponse::Full`],
///   as RFC 9110 §14.2 asks of a server that does not understand the header.
/// - One element: [`RangeResponse::Partial`] when it selects bytes, else
///   [`RangeResponse::Unsatisfiable`]; except that a non-zero suffix of an empty
///   representation is [`RangeResponse::Full`]: RFC 9110 §14.1.3 calls it satisfiable, yet the
///   empty selection cannot be sent as a `206`, and the whole (empty) representation is what
///   it asks for.
/// - More than one element: [`RangeResponse::Full`]. RFC 9110 §14.2 lets a server ignore a
///   `Range` header, and a client that asks for several ranges must accept a `200` with the
///   whole representation. The alternative, a `multipart/byteranges` `206`, is what general
///   web servers send, and each had to bound it against denial of service (many small or
///   overlapping ranges that make a response far larger than the file: Apache's `MaxRanges`
///   after CVE-2011-3192, Go's `ServeContent` falling back to the whole file when the ranges
///   add up past its size). The clients of a model folder (`tritium pull`, browsers fetching
///   shards, download resumption) ask for one range at a time, so the whole file is always a
///   correct answer here and never larger than the file itself.
pub fn range_response(value: &str, len: u64) -> RangeResponse {
    let mut count = 0usize;
    let mut only = None;
    let valid = for_each_spec(value, |spec| {
        count += 1;
        only = Some(spec);
    });
    match (valid, count, only) {
        (true, 1, Some(spec)) => match spec.resolve(len) {
            Some((first, last)) => RangeResponse::Partial { first, last },
            None if len == 0 && matches!(spec, ByteRangeSpec::Suffix(n) if n > 0) => {
                RangeResponse::Full
            }
            None => RangeResponse::Unsatisfiable,
        },
        _ => RangeResponse::Full,
    }
}

/// The elements of a `Range: bytes=...` header, or `None` when the value is not a valid
/// `bytes` range set (see the module documentation for the syntax accepted).
pub fn parse_range_header(value: &str) -> Option<Vec<ByteRangeSpec>> {
    let mut specs = Vec::new();
    for_each_spec(value, |spec| specs.push(spec)).then_some(specs)
}

/// Call `f` with each element of the range set in `value`; `false` (after perhaps some calls)
/// when `value` is not a valid `bytes` range set. It allocates nothing, so a header of many
/// thousands of elements costs a server no memory.
fn for_each_spec(value: &str, mut f: impl FnMut(ByteRangeSpec)) -> bool {
    let Some((unit, set)) = value.trim_matches(is_ows).split_once('=') else {
        return false;
    };
    if !unit.eq_ignore_ascii_case("bytes") {
        return false;
    }
    let mut any = false;
    for element in set.split(',') {
        let element = element.trim_matches(is_ows);
        if element.is_empty() {
            continue;
        }
        match parse_spec(element) {
            Some(spec) => f(spec),
            None => return false,
        }
        any = true;
    }
    any
}

/// Optional whitespace (RFC 9110 §5.6.3): spaces and horizontal tabs.
fn is_ows(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// `first-last`, `first-` or `-suffix`.
fn parse_spec(element: &str) -> Option<ByteRangeSpec> {
    let (first, last) = element.split_once('-')?;
    if first.is_empty() {
        return Some(ByteRangeSpec::Suffix(saturating_decimal(last)?));
    }
    let first_value = saturating_decimal(first)?;
    if last.is_empty() {
        return Some(ByteRangeSpec::FromTo {
            first: first_value,
            last: None,
        });
    }
    let last_value = saturating_decimal(last)?;
    if compare_decimal(last, first) == Ordering::Less {
        return None;
    }
    Some(ByteRangeSpec::FromTo {
        first: first_value,
        last: Some(last_value),
    })
}

/// One or more ASCII digits as a number, `u64::MAX` when it is larger; `None` for anything
/// else (empty, a sign, spaces, other characters).
fn saturating_decimal(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Compare two strings of ASCII digits as the numbers they spell, however long.
fn compare_decimal(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::ByteRangeSpec::{FromTo, Suffix};
    use super::RangeResponse::{Full, Partial, Unsatisfiable};
    use super::*;

    fn from_to(first: u64, last: u64) -> ByteRangeSpec {
        FromTo {
            first,
            last: Some(last),
        }
    }

    fn open(first: u64) -> ByteRangeSpec {
        FromTo { first, last: None }
    }

    #[test]
    fn range_sets_parse() {
        for (value, specs) in [
            ("bytes=0-499", vec![from_to(0, 499)]),
            ("bytes=0-0", vec![from_to(0, 0)]),
            ("bytes=100-", vec![open(100)]),
            ("bytes=-500", vec![Suffix(500)]),
            ("bytes=-0", vec![Suffix(0)]),
            ("BYTES=1-2", vec![from_to(1, 2)]),
            ("Bytes=007-010", vec![from_to(7, 10)]),
            ("bytes=0-1,5-9", vec![from_to(0, 1), from_to(5, 9)]),
            (
                "bytes=0-1, -3,\t7-",
                vec![from_to(0, 1), Suffix(3), open(7)],
            ),
            // Spaces around the value and around list elements.
            (" bytes=0-1 ", vec![from_to(0, 1)]),
            ("bytes= 0-1", vec![from_to(0, 1)]),
            // Empty list elements are ignored.
            ("bytes=,0-1", vec![from_to(0, 1)]),
            ("bytes=0-1,", vec![from_to(0, 1)]),
            ("bytes=0-1, ,,2-3", vec![from_to(0, 1), from_to(2, 3)]),
            // Past u64: saturated, still valid.
            (
                "bytes=0-99999999999999999999999",
                vec![from_to(0, u64::MAX)],
            ),
            ("bytes=99999999999999999999999-", vec![open(u64::MAX)]),
            ("bytes=-99999999999999999999999", vec![Suffix(u64::MAX)]),
            (
                "bytes=18446744073709551615-18446744073709551616",
                vec![from_to(u64::MAX, u64::MAX)],
            ),
            // Equal numbers however many leading zeros.
            ("bytes=0005-5", vec![from_to(5, 5)]),
        ] {
            assert_eq!(parse_range_header(value), Some(specs), "{value:?}");
        }
    }

    #[test]
    fn invalid_range_sets_are_refused() {
        for value in [
            "",
            "bytes",
            "bytes=",
            "bytes=,",
            "bytes= , ",
            "=0-1",
            "items=0-5",
            "bytes =0-1",
            "bytes=abc",
            "bytes=a-b",
            "bytes=0-1,abc",
            "bytes=1-0",
            "bytes=5-4,0-1",
            "bytes=-",
            "bytes=--1",
            "bytes=0--1",
            "bytes=+1-2",
            "bytes=1-+2",
            "bytes=-+2",
            "bytes=0 - 1",
            "bytes=0x10-",
            "bytes=1.5-2",
            "bytes=0-1;2-3",
            "bytes=0-1-2",
            "bytes=１-２",
            // Saturation does not hide `last < first`.
            "bytes=99999999999999999999999-99999999999999999999998",
            "bytes=18446744073709551616-18446744073709551615",
        ] {
            assert_eq!(parse_range_header(value), None, "{value:?}");
            assert_eq!(range_response(value, 1000), Full, "{value:?}");
        }
    }

    #[test]
    fn elements_resolve_against_the_length() {
        assert_eq!(from_to(0, 0).resolve(10), Some((0, 0)));
        assert_eq!(from_to(2, 5).resolve(10), Some((2, 5)));
        assert_eq!(from_to(2, 50).resolve(10), Some((2, 9)));
        assert_eq!(from_to(9, u64::MAX).resolve(10), Some((9, 9)));
        assert_eq!(from_to(10, 10).resolve(10), None);
        assert_eq!(open(0).resolve(10), Some((0, 9)));
        assert_eq!(open(9).resolve(10), Some((9, 9)));
        assert_eq!(open(10).resolve(10), None);
        assert_eq!(open(u64::MAX).resolve(u64::MAX), None);
        assert_eq!(
            open(u64::MAX - 1).resolve(u64::MAX),
            Some((u64::MAX - 1, u64::MAX - 1))
        );
        assert_eq!(Suffix(3).resolve(10), Some((7, 9)));
        assert_eq!(Suffix(10).resolve(10), Some((0, 9)));
        assert_eq!(Suffix(u64::MAX).resolve(10), Some((0, 9)));
        assert_eq!(Suffix(0).resolve(10), None);
        for spec in [from_to(0, 0), open(0), Suffix(1), Suffix(0)] {
            assert_eq!(spec.resolve(0), None, "{spec:?}");
        }
    }

    #[test]
    fn responses() {
        let len = 1000;
        for (value, expected) in [
            (
                "bytes=0-499",
                Partial {
                    first: 0,
                    last: 499,
                },
            ),
            ("bytes=0-0", Partial { first: 0, last: 0 }),
            (
                "bytes=999-",
                Partial {
                    first: 999,
                    last: 999,
                },
            ),
            (
                "bytes=100-",
                Partial {
                    first: 100,
                    last: 999,
                },
            ),
            (
                "bytes=-500",
                Partial {
                    first: 500,
                    last: 999,
                },
            ),
            (
                "bytes=-5000",
                Partial {
                    first: 0,
                    last: 999,
                },
            ),
            (
                "bytes=0-99999999999999999999999",
                Partial {
                    first: 0,
                    last: 999,
                },
            ),
            (
                "bytes=,500-599,",
                Partial {
                    first: 500,
                    last: 599,
                },
            ),
            ("bytes=1000-", Unsatisfiable),
            ("bytes=1000-2000", Unsatisfiable),
            ("bytes=-0", Unsatisfiable),
            ("bytes=99999999999999999999999-", Unsatisfiable),
            // Several ranges: the whole representation, satisfiable or not.
            ("bytes=0-1,5-9", Full),
            ("bytes=0-1,0-1", Full),
            ("bytes=2000-3000,4000-", Full),
            // Not understood: ignored.
            ("items=0-5", Full),
            ("bytes=abc", Full),
        ] {
            assert_eq!(range_response(value, len), expected, "{value:?}");
        }
    }

    #[test]
    fn an_empty_representation_has_no_byte_to_send() {
        assert_eq!(range_response("bytes=0-", 0), Unsatisfiable);
        assert_eq!(range_response("bytes=0-0", 0), Unsatisfiable);
        assert_eq!(range_response("bytes=-0", 0), Unsatisfiable);
        // A suffix of an empty representation is the (empty) representation.
        assert_eq!(range_response("bytes=-5", 0), Full);
    }

    /// Every range set of up to 6 characters over digits, `-`, `,`, a space and a letter,
    /// against lengths around its numbers: no panic, and answers that agree with the parsed
    /// elements (what the fuzz target checks on arbitrary input).
    #[test]
    fn short_range_sets_agree_with_their_elements() {
        let alphabet = ['0', '1', '9', '-', ',', ' ', 'x'];
        let mut set = String::new();
        let mut checked = 0;
        for n in 0..=6u32 {
            for mut code in 0..alphabet.len().pow(n) {
                set.clear();
                for _ in 0..n {
                    set.push(alphabet[code % alphabet.len()]);
                    code /= alphabet.len();
                }
                let value = format!("bytes={set}");
                let specs = parse_range_header(&value);
                for len in [0, 1, 2, 10, 99, 1000, u64::MAX] {
                    let answer = range_response(&value, len);
                    match (&specs, answer) {
                        (Some(specs), Partial { first, last }) => {
                            assert!(first <= last && last < len, "{value:?} {len}");
                            assert_eq!(specs.len(), 1, "{value:?}");
                            assert_eq!(specs[0].resolve(len), Some((first, last)));
                        }
                        (Some(specs), Unsatisfiable) => {
                            assert_eq!(specs.len(), 1, "{value:?}");
                            assert_eq!(specs[0].resolve(len), None, "{value:?}");
                        }
                        (Some(specs), Full) => {
                            assert!(specs.len() > 1 || len == 0, "{value:?} {len}")
                        }
                        (None, Full) => {}
                        (None, answer) => panic!("{value:?} {len}: {answer:?} from no range set"),
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    #[test]
    fn many_elements_are_answered_whole() {
        let value = format!("bytes={}", "0-0,".repeat(100_000));
        assert_eq!(range_response(&value, 10), Full);
        assert_eq!(parse_range_header(&value).map(|v| v.len()), Some(100_000));
    }
}
