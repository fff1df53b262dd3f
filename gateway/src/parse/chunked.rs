//! The chunk-size line of `Transfer-Encoding: chunked` (RFC 9112 §7.1). Pure and
//! bounded; chunk extensions are accepted and ignored.

/// Longest chunk-size line accepted (size, extensions, no CRLF).
pub const MAX_CHUNK_LINE: usize = 4096;

/// Why a chunk-size line was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// Not a hex size, too many digits, or bad characters.
    #[error("malformed chunk size line")]
    Malformed,
}

/// Parses a chunk-size line without its CRLF: `1a;ext=1` → 26.
pub fn parse_chunk_size(line: &[u8]) -> Result<u64, ChunkError> {
    if line.len() > MAX_CHUNK_LINE {
        return Err(ChunkError::Malformed);
    }
    let digits_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let digits = &line[..digits_end];
    if digits.is_empty() || digits.len() > 15 {
        return Err(ChunkError::Malformed);
    }
    let rest = &line[digits_end..];
    let rest_ok = match rest.iter().position(|&b| b != b' ' && b != b'\t') {
        None => true,
        Some(i) => {
            rest[i] == b';'
                && rest
                    .iter()
                    .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        }
    };
    if !rest_ok {
        return Err(ChunkError::Malformed);
    }
    Ok(digits.iter().fold(0u64, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => d - b'A' + 10,
        };
        (acc << 4) | u64::from(v)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_chunk_size(b"0"), Ok(0));
        assert_eq!(parse_chunk_size(b"1A"), Ok(26));
        assert_eq!(parse_chunk_size(b"ff ; name=value"), Ok(255));
        assert!(parse_chunk_size(b"").is_err());
        assert!(parse_chunk_size(b"-1").is_err());
        assert!(parse_chunk_size(b"1 2").is_err());
        assert!(parse_chunk_size(b"ffffffffffffffff").is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_lines_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_chunk_size(&bytes);
        }

        #[test]
        fn hex_round_trips(n in 0u64..(1 << 60)) {
            prop_assert_eq!(parse_chunk_size(format!("{n:x}").as_bytes()), Ok(n));
        }
    }
}
