//! `Range` request headers (`tritium serve-model`): the input is a representation length (the
//! first 8 bytes, little-endian) and the header value (the rest, as UTF-8 with replacement
//! characters). Nothing may panic, and every answer must agree with the parsed elements: a
//! `206` only for a lone element that selects bytes, and only bytes of the representation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tritium_storage::download::{parse_range_header, range_response, RangeResponse};

fuzz_target!(|data: &[u8]| {
    let (len, value) = data.split_at(data.len().min(8));
    let mut bytes = [0u8; 8];
    bytes[..len.len()].copy_from_slice(len);
    let len = u64::from_le_bytes(bytes);
    let value = String::from_utf8_lossy(value);

    let specs = parse_range_header(&value);
    match range_response(&value, len) {
        RangeResponse::Partial { first, last } => {
            assert!(
                first <= last && last < len,
                "{value:?} {len}: {first}-{last}"
            );
            let specs = specs.expect("a 206 comes from a valid header");
            assert_eq!(specs.len(), 1, "{value:?}");
            assert_eq!(specs[0].resolve(len), Some((first, last)), "{value:?}");
        }
        RangeResponse::Unsatisfiable => {
            let specs = specs.expect("a 416 comes from a valid header");
            assert_eq!(specs.len(), 1, "{value:?}");
            assert_eq!(specs[0].resolve(len), None, "{value:?}");
        }
        RangeResponse::Full => {
            if let Some(specs) = specs {
                assert!(specs.len() > 1 || len == 0, "{value:?} {len}");
            }
        }
    }
});
