//! Log output of every binary: one line per event on the chosen stream, as text or as
//! JSON (`{"timestamp":…,"level":…,"fields":{"message":…},"target":…}`), the filter from
//! `RUST_LOG` (default `info`). Colour codes are written only when the stream is a
//! terminal, never into a pod log or a file.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// The environment variable each binary reads its log format from (its `--log-format`
/// flag wins).
pub const FORMAT_ENV: &str = "PROXY_POOL_LOG_FORMAT";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default on a workstation).
    #[default]
    Text,
    /// One JSON object per line (the chart's default in clusters).
    Json,
}

/// A `--log-format` / `PROXY_POOL_LOG_FORMAT` value that is neither `text` nor `json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown log format {0:?}: expected `text` or `json`")]
pub struct UnknownLogFormat(pub String);

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(UnknownLogFormat(other.to_owned())),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Text => "text",
            Self::Json => "json",
        })
    }
}

/// Where log lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output (the servers).
    Stdout,
    /// Standard error (tools whose standard output is their result).
    Stderr,
}

/// Why logging could not start.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// `RUST_LOG` does not parse as a filter.
    #[error("RUST_LOG: {0}")]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    /// A global subscriber was already installed.
    #[error("logging already initialised: {0}")]
    Installed(String),
}

/// The filter from `RUST_LOG`, `info` when it is unset or empty. A value that does not
/// parse is an error (a typo must not silently drop every line).
pub fn filter() -> Result<EnvFilter, InitError> {
    match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(v) if !v.trim().is_empty() => Ok(EnvFilter::builder().parse(v)?),
        _ => Ok(EnvFilter::new("info")),
    }
}

/// Installs the global subscriber: `format` lines on `stream`, filtered by [`filter`].
pub fn init(format: LogFormat, stream: Stream) -> Result<(), InitError> {
    let filter = filter()?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match (format, stream) {
        (LogFormat::Text, Stream::Stdout) => builder
            .with_ansi(std::io::stdout().is_terminal())
            .with_writer(std::io::stdout)
            .try_init(),
        (LogFormat::Text, Stream::Stderr) => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .try_init(),
        (LogFormat::Json, Stream::Stdout) => builder
            .json()
            .with_current_span(false)
            .with_writer(std::io::stdout)
            .try_init(),
        (LogFormat::Json, Stream::Stderr) => builder
            .json()
            .with_current_span(false)
            .with_writer(std::io::stderr)
            .try_init(),
    };
    installed.map_err(|e| InitError::Installed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_and_print_back() {
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(f.to_string().parse::<LogFormat>(), Ok(f));
        }
        assert_eq!(
            "JSON".parse::<LogFormat>(),
            Err(UnknownLogFormat("JSON".into()))
        );
        assert_eq!(
            UnknownLogFormat("x".into()).to_string(),
            "unknown log format \"x\": expected `text` or `json`"
        );
    }
}
