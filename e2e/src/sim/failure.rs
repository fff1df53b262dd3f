//! Failure modes a simulated proxy can be told to exhibit, faults of the vendor API,
//! and the runtime switch that holds either. A mode is read when a connection is accepted:
//! changing it affects new connections, never tunnels already open.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Longest handshake delay `slow` accepts, so a typo cannot park connections for hours.
pub const MAX_SLOW_DELAY: Duration = Duration::from_secs(300);

/// How a simulated proxy misbehaves. JSON: `{"mode":"slow","delayMs":500}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(
    tag = "mode",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum FailureMode {
    /// Behaves like a healthy vendor proxy.
    #[default]
    None,
    /// Accepts the TCP connection and closes it at once.
    Refuse,
    /// Waits `delay_ms` after accepting before it reads the handshake.
    Slow {
        /// Delay in milliseconds (at most [`MAX_SLOW_DELAY`]).
        delay_ms: u64,
    },
    /// Rejects every credential, even the right one (HTTP 407 / SOCKS5 auth failure).
    BadAuth,
    /// Closes the client connection after `bytes` bytes have come back from the target.
    DropAfter {
        /// Bytes relayed from the target before the connection is cut.
        bytes: u64,
    },
    /// Leaves through the shared egress address instead of the proxy's own.
    WrongEgress,
}

impl FailureMode {
    /// Checks the mode's parameters; returns a description of the first problem.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Self::Slow { delay_ms } if Duration::from_millis(*delay_ms) > MAX_SLOW_DELAY => Err(
                format!("delayMs must be at most {}", MAX_SLOW_DELAY.as_millis()),
            ),
            _ => Ok(()),
        }
    }

    /// The handshake delay, if this mode has one.
    pub(crate) fn delay(&self) -> Option<Duration> {
        match self {
            Self::Slow { delay_ms } => Some(Duration::from_millis(*delay_ms).min(MAX_SLOW_DELAY)),
            _ => None,
        }
    }

    /// How many target bytes may be relayed before the connection is cut.
    pub(crate) fn byte_budget(&self) -> Option<u64> {
        match self {
            Self::DropAfter { bytes } => Some(*bytes),
            _ => None,
        }
    }
}

/// Faults of the vendor API itself, for testing a provider reconciler.
/// JSON: `{"mode":"status","status":503}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(
    tag = "mode",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum VendorFault {
    /// `GET /v1/proxies` works.
    #[default]
    None,
    /// `GET /v1/proxies` answers this status (400-599) with a JSON error and issues nothing;
    /// 429 and 503 carry `Retry-After: 1`.
    Status {
        /// The HTTP status to answer.
        status: u16,
    },
    /// `GET /v1/proxies` waits `delay_ms` before answering normally.
    Slow {
        /// Delay in milliseconds (at most [`MAX_SLOW_DELAY`]).
        delay_ms: u64,
    },
    /// `GET /v1/proxies` answers 200 with a truncated, unparseable JSON body.
    Garbage,
}

impl VendorFault {
    /// Checks the fault's parameters; returns a description of the first problem.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Self::Status { status } if !(400..=599).contains(status) => {
                Err("status must be in 400..=599".into())
            }
            Self::Slow { delay_ms } => FailureMode::Slow {
                delay_ms: *delay_ms,
            }
            .check(),
            _ => Ok(()),
        }
    }
}

/// A value changeable at run time: a proxy's failure mode, the vendor API's fault.
///
/// A plain mutex: the value is `Copy`, the critical section is a load or a store,
/// and no lock is ever held across an `.await`.
#[derive(Debug, Default)]
pub(crate) struct Switch<T>(Mutex<T>);

impl<T: Copy> Switch<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    pub(crate) fn get(&self) -> T {
        *self.0.lock()
    }

    pub(crate) fn set(&self, value: T) {
        *self.0.lock() = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_tagged_camel_case() {
        let slow: FailureMode = serde_json::from_str(r#"{"mode":"slow","delayMs":250}"#).unwrap();
        assert_eq!(slow, FailureMode::Slow { delay_ms: 250 });
        let drop: FailureMode = serde_json::from_str(r#"{"mode":"dropAfter","bytes":10}"#).unwrap();
        assert_eq!(drop.byte_budget(), Some(10));
        assert_eq!(
            serde_json::to_string(&FailureMode::WrongEgress).unwrap(),
            r#"{"mode":"wrongEgress"}"#
        );
        assert!(serde_json::from_str::<FailureMode>(r#"{"mode":"explode"}"#).is_err());
        assert!(
            serde_json::from_str::<FailureMode>(r#"{"mode":"slow","delayMs":1,"x":1}"#).is_err()
        );
    }

    #[test]
    fn slow_delay_is_bounded() {
        assert!(FailureMode::Slow { delay_ms: 1_000 }.check().is_ok());
        assert!(
            FailureMode::Slow {
                delay_ms: 10_000_000
            }
            .check()
            .is_err()
        );
        assert_eq!(
            FailureMode::Slow { delay_ms: u64::MAX }.delay(),
            Some(MAX_SLOW_DELAY)
        );
    }

    #[test]
    fn vendor_faults_are_checked() {
        let fault: VendorFault = serde_json::from_str(r#"{"mode":"status","status":429}"#).unwrap();
        assert!(fault.check().is_ok());
        assert!(VendorFault::Status { status: 200 }.check().is_err());
        assert!(VendorFault::Slow { delay_ms: u64::MAX }.check().is_err());
    }

    #[test]
    fn switch_changes_mode() {
        let switch = Switch::new(FailureMode::None);
        switch.set(FailureMode::Refuse);
        assert_eq!(switch.get(), FailureMode::Refuse);
    }
}
