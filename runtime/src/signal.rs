//! SIGTERM / Ctrl-C → shutdown: the one signal handler of every binary.

/// Resolves on SIGTERM or Ctrl-C (SIGINT). Where SIGTERM cannot be listened for (not
/// Unix, or the handler could not be installed), on Ctrl-C alone.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
