//! The chunk-size line and the trailer section of `Transfer-Encoding: chunked`
//! (RFC 9112 §7.1). Pure and bounded; chunk extensions are accepted and ignored.
//! Trailer fields are parsed like header lines and then dropped by the relay (a proxy
//! may discard them, RFC 9112 §7.1.2): nothing a client puts after the last chunk
//! reaches the other side unchecked.

/// Longest chunk-size line accepted (size, extensions, no CRLF).
pub const MAX_CHUNK_LINE: usize = 4096;
/// Most bytes of trailer fields accepted after the last chunk.
pub const MAX_TRAILER_BYTES: usize = 8 * 1024;

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

/// Checks one trailer field line (without CRLF) like a header line: a token name,
/// `:`, then a value of visible characters, spaces and tabs (no CR, LF or NUL, no
/// obsolete folding).
pub fn check_trailer_line(line: &[u8]) -> Result<(), ChunkError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(ChunkError::Malformed)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.iter().all(|&b| tchar(b)) {
        return Err(ChunkError::Malformed);
    }
    if value
        .iter()
        .any(|&b| !(b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b) || b >= 0x80))
    {
        return Err(ChunkError::Malformed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn trailer_lines_are_header_lines() {
        assert_eq!(check_trailer_line(b"Checksum: abc"), Ok(()));
        assert_eq!(check_trailer_line(b"X-T:"), Ok(()));
        crate::parse::assert_refused_all(
            check_trailer_line,
            &[
                b" folded: x",
                b"no colon",
                b": empty name",
                b"bad name: x",
                b"X: a\rb",
                b"X: a\nGET / HTTP/1.1",
                b"X: a\0",
            ],
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_chunk_size(b"0"), Ok(0));
        assert_eq!(parse_chunk_size(b"1A"), Ok(26));
        assert_eq!(parse_chunk_size(b"ff ; name=value"), Ok(255));
        crate::parse::assert_refused_all(
            parse_chunk_size,
            &[b"", b"-1", b"1 2", b"ffffffffffffffff"],
        );
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
