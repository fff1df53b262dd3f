//! Log capture for tests that read what a component logged: a `tracing` writer that
//! keeps every byte in memory.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use tracing_subscriber::fmt::MakeWriter;

/// An in-memory log sink; clones share one buffer. Give it to
/// `tracing_subscriber::fmt().with_writer(capture.clone())`.
#[derive(Clone, Debug, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// A capture of every event up to `level`, installed as this thread's default
    /// subscriber until the guard drops.
    pub fn set_default(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        let capture = Self::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(capture.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, guard)
    }

    /// Everything logged so far, as bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Everything logged so far; panics if it is not UTF-8.
    #[allow(
        clippy::expect_used,
        reason = "a test fixture: log output that is not UTF-8 fails the test"
    )]
    pub fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("log output is UTF-8")
    }

    /// Everything logged so far, invalid UTF-8 replaced.
    pub fn text_lossy(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
