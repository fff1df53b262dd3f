//! Bounded parser for HTTP/1.x request and response heads. Pure: bytes in, a head
//! borrowing those bytes out. It never allocates beyond the caller's header-range
//! vector (reused per connection), never reads past `max_head_bytes`, never panics.

use std::ops::Range;

/// Upper bound on any configured header count.
pub const HARD_MAX_HEADERS: usize = 256;
const MAX_METHOD: usize = 16;
const MAX_REASON: usize = 1024;

/// Size limits a head must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLimits {
    /// Request line + headers + the blank line.
    pub max_head_bytes: usize,
    /// Header fields (capped at [`HARD_MAX_HEADERS`]).
    pub max_headers: usize,
}

impl Default for HeadLimits {
    fn default() -> Self {
        Self {
            max_head_bytes: 16 * 1024,
            max_headers: 64,
        }
    }
}

/// Why a head was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// No end of head within `max_head_bytes`.
    #[error("head larger than the limit")]
    TooLarge,
    /// More header fields than allowed.
    #[error("too many header fields")]
    TooManyHeaders,
    /// Malformed request line.
    #[error("malformed request line")]
    BadRequestLine,
    /// Malformed status line.
    #[error("malformed status line")]
    BadStatusLine,
    /// Not HTTP/1.0 or HTTP/1.1.
    #[error("unsupported HTTP version")]
    BadVersion,
    /// Malformed header field (including obsolete line folding).
    #[error("malformed header field")]
    BadHeader,
    /// Contradictory or malformed body framing headers.
    #[error("invalid message framing")]
    BadFraming,
}

/// HTTP version of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `HTTP/1.0`
    Http10,
    /// `HTTP/1.1`
    Http11,
}

/// Where one header field's name and value sit in the head bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRange {
    name: Range<u32>,
    value: Range<u32>,
}

/// The header fields of a parsed head.
#[derive(Debug, Clone, Copy)]
pub struct Headers<'a> {
    buf: &'a [u8],
    ranges: &'a [HeaderRange],
}

impl<'a> Headers<'a> {
    /// Fields in order, as `(name, value)` with surrounding whitespace trimmed.
    pub fn iter(self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        let buf = self.buf;
        self.ranges.iter().map(move |r| {
            let name = buf.get(r.name.start as usize..r.name.end as usize);
            let value = buf.get(r.value.start as usize..r.value.end as usize);
            (name.unwrap_or_default(), value.unwrap_or_default())
        })
    }

    /// Values of every field named `name` (ASCII case-insensitive).
    pub fn get_all<'n>(self, name: &'n [u8]) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The first field named `name`.
    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.get_all(name).next()
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether a comma-separated list field `name` contains `token` (case-insensitive).
    pub fn has_token(&self, name: &[u8], token: &[u8]) -> bool {
        self.get_all(name).any(|v| {
            v.split(|&b| b == b',')
                .any(|t| trim(t).eq_ignore_ascii_case(token))
        })
    }
}

/// A parsed request head.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// Method token, e.g. `GET`.
    pub method: &'a str,
    /// Request target as sent (authority form for CONNECT, absolute or origin form else).
    pub target: &'a [u8],
    /// Protocol version.
    pub version: Version,
    /// Header fields.
    pub headers: Headers<'a>,
    /// Bytes the head took, including the blank line.
    pub len: usize,
}

/// A parsed response head.
#[derive(Debug, Clone, Copy)]
pub struct ResponseHead<'a> {
    /// Status code, 100..=999.
    pub status: u16,
    /// Protocol version.
    pub version: Version,
    /// Header fields.
    pub headers: Headers<'a>,
    /// Bytes the head took, including the blank line.
    pub len: usize,
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the connection closes (responses only).
    UntilClose,
}

/// Returns the length of the head (through `\r\n\r\n`) if `buf` holds a complete one.
/// `Err(TooLarge)` when none ends within `max`.
pub fn head_len(buf: &[u8], max: usize) -> Result<Option<usize>, HeadError> {
    head_len_from(buf, 0, max).0
}

/// [`head_len`] for a buffer whose first `from` bytes are known to hold no end of
/// head: only the rest is searched. Also returns how many bytes were examined.
pub fn head_len_from(
    buf: &[u8],
    from: usize,
    max: usize,
) -> (Result<Option<usize>, HeadError>, usize) {
    let end = buf.len().min(max);
    let from = from.min(end);
    let window = &buf[from..end];
    let found = window
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|pos| from + pos + 4);
    let result = match found {
        Some(len) => Ok(Some(len)),
        None if buf.len() >= max => Err(HeadError::TooLarge),
        None => Ok(None),
    };
    (result, window.len())
}

/// Parses a request head at the start of `buf`. `Ok(None)`: incomplete, read more.
pub fn parse_request<'a>(
    buf: &'a [u8],
    limits: HeadLimits,
    ranges: &'a mut Vec<HeaderRange>,
) -> Result<Option<RequestHead<'a>>, HeadError> {
    let Some(len) = head_len(buf, limits.max_head_bytes)? else {
        return Ok(None);
    };
    let head = &buf[..len];
    let (line, rest_at) = split_line(head, 0).ok_or(HeadError::BadRequestLine)?;
    let mut parts = line.splitn(3, |&b| b == b' ');
    let method = parts.next().ok_or(HeadError::BadRequestLine)?;
    let target = parts.next().ok_or(HeadError::BadRequestLine)?;
    let version = parts.next().ok_or(HeadError::BadRequestLine)?;
    if method.is_empty() || method.len() > MAX_METHOD || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HeadError::BadRequestLine);
    }
    if target.is_empty() || !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return Err(HeadError::BadRequestLine);
    }
    let version = parse_version(version)?;
    let method = std::str::from_utf8(method).map_err(|_| HeadError::BadRequestLine)?;
    parse_fields(head, rest_at, limits, ranges)?;
    Ok(Some(RequestHead {
        method,
        target,
        version,
        headers: Headers { buf: head, ranges },
        len,
    }))
}

/// Parses a response head at the start of `buf`. `Ok(None)`: incomplete, read more.
pub fn parse_response<'a>(
    buf: &'a [u8],
    limits: HeadLimits,
    ranges: &'a mut Vec<HeaderRange>,
) -> Result<Option<ResponseHead<'a>>, HeadError> {
    let Some(len) = head_len(buf, limits.max_head_bytes)? else {
        return Ok(None);
    };
    let head = &buf[..len];
    let (line, rest_at) = split_line(head, 0).ok_or(HeadError::BadStatusLine)?;
    let version = parse_version(line.get(..8).ok_or(HeadError::BadStatusLine)?)?;
    let rest = &line[8..];
    let code = match rest {
        [b' ', a, b, c] | [b' ', a, b, c, b' ', ..] => [*a, *b, *c],
        _ => return Err(HeadError::BadStatusLine),
    };
    if !code.iter().all(u8::is_ascii_digit) || code[0] == b'0' || rest.len() > 5 + MAX_REASON {
        return Err(HeadError::BadStatusLine);
    }
    let status = code
        .iter()
        .fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    parse_fields(head, rest_at, limits, ranges)?;
    Ok(Some(ResponseHead {
        status,
        version,
        headers: Headers { buf: head, ranges },
        len,
    }))
}

/// Body framing of a request (RFC 9112 §6.3); both `Transfer-Encoding` and
/// `Content-Length`, or conflicting lengths, are rejected (request smuggling).
pub fn request_framing(headers: &Headers<'_>) -> Result<BodyFraming, HeadError> {
    match (transfer_encoding(headers)?, content_length(headers)?) {
        (Some(_), Some(_)) => Err(HeadError::BadFraming),
        (Some(true), None) => Ok(BodyFraming::Chunked),
        (Some(false), None) => Err(HeadError::BadFraming),
        (None, Some(0)) | (None, None) => Ok(BodyFraming::None),
        (None, Some(n)) => Ok(BodyFraming::Length(n)),
    }
}

/// Body framing of a response to a request (`head_request`: the request was HEAD).
pub fn response_framing(
    head_request: bool,
    status: u16,
    headers: &Headers<'_>,
) -> Result<BodyFraming, HeadError> {
    if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(BodyFraming::None);
    }
    match (transfer_encoding(headers)?, content_length(headers)?) {
        (Some(true), _) => Ok(BodyFraming::Chunked),
        (Some(false), _) => Ok(BodyFraming::UntilClose),
        (None, Some(n)) => Ok(BodyFraming::Length(n)),
        (None, None) => Ok(BodyFraming::UntilClose),
    }
}

/// Whether a header is hop-by-hop (RFC 9110 §7.6.1) for this message: one of the
/// fixed set, or named in its `Connection` field. `Proxy-Authorization` included.
pub fn is_hop_by_hop(headers: &Headers<'_>, name: &[u8]) -> bool {
    const FIXED: [&[u8]; 9] = [
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    ];
    FIXED.iter().any(|f| f.eq_ignore_ascii_case(name)) || headers.has_token(b"connection", name)
}

/// Whether the sender of this head wants the connection kept open afterwards.
pub fn wants_keep_alive(version: Version, headers: &Headers<'_>) -> bool {
    let close = headers.has_token(b"connection", b"close")
        || headers.has_token(b"proxy-connection", b"close");
    match version {
        Version::Http11 => !close,
        Version::Http10 => {
            !close
                && (headers.has_token(b"connection", b"keep-alive")
                    || headers.has_token(b"proxy-connection", b"keep-alive"))
        }
    }
}

/// `Some(true)` if the last transfer coding is chunked, `Some(false)` for others.
fn transfer_encoding(headers: &Headers<'_>) -> Result<Option<bool>, HeadError> {
    let mut last: Option<&[u8]> = None;
    for value in headers.get_all(b"transfer-encoding") {
        for coding in value.split(|&b| b == b',') {
            let coding = trim(coding);
            if !coding.is_empty() {
                last = Some(coding);
            }
        }
    }
    Ok(last.map(|c| c.eq_ignore_ascii_case(b"chunked")))
}

fn content_length(headers: &Headers<'_>) -> Result<Option<u64>, HeadError> {
    let mut found: Option<u64> = None;
    for value in headers.get_all(b"content-length") {
        for part in value.split(|&b| b == b',') {
            let n = parse_decimal(trim(part)).ok_or(HeadError::BadFraming)?;
            if found.is_some_and(|f| f != n) {
                return Err(HeadError::BadFraming);
            }
            found = Some(n);
        }
    }
    Ok(found)
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

fn parse_version(v: &[u8]) -> Result<Version, HeadError> {
    match v {
        b"HTTP/1.1" => Ok(Version::Http11),
        b"HTTP/1.0" => Ok(Version::Http10),
        _ => Err(HeadError::BadVersion),
    }
}

/// Header fields from `at` to the blank line that ends `head`.
fn parse_fields(
    head: &[u8],
    mut at: usize,
    limits: HeadLimits,
    ranges: &mut Vec<HeaderRange>,
) -> Result<(), HeadError> {
    ranges.clear();
    let max = limits.max_headers.min(HARD_MAX_HEADERS);
    loop {
        let (line, next) = split_line(head, at).ok_or(HeadError::BadHeader)?;
        if line.is_empty() {
            return Ok(());
        }
        if ranges.len() >= max {
            return Err(HeadError::TooManyHeaders);
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HeadError::BadHeader)?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(HeadError::BadHeader);
        }
        let raw = &line[colon + 1..];
        if raw.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err(HeadError::BadHeader);
        }
        let lead = raw.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
        let value = trim(raw);
        let name_start = at;
        let value_start = at + colon + 1 + lead;
        let to_u32 = |n: usize| u32::try_from(n).map_err(|_| HeadError::TooLarge);
        ranges.push(HeaderRange {
            name: to_u32(name_start)?..to_u32(name_start + name.len())?,
            value: to_u32(value_start)?..to_u32(value_start + value.len())?,
        });
        at = next;
    }
}

/// The CRLF-terminated line starting at `at` and the offset after it.
fn split_line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let line = &rest[..end];
    if line.iter().any(|&b| b == b'\n' || b == b'\r') {
        return None;
    }
    Some((line, at + end + 2))
}

/// Trims spaces and tabs on both ends.
pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests;
