//! The echo endpoint EGRESS checks probe through a proxy (the checker's `echo`
//! command, and the simulator's echo server in tests): which request headers it
//! reports back because they reveal a proxy or its client.

/// Headers that reveal a proxy or its client, reported by the echo endpoint.
pub const LEAK_HEADERS: [&str; 5] = [
    "via",
    "forwarded",
    "x-forwarded-for",
    "x-real-ip",
    "proxy-authorization",
];

/// What the echo endpoint reports for leak header `name` whose value it read as
/// `value`: the value itself, except `proxy-authorization`, which is always
/// `<redacted>`.
pub fn shown_value(name: &str, value: String) -> String {
    if name == "proxy-authorization" {
        "<redacted>".to_owned()
    } else {
        value
    }
}
