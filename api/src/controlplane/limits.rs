//! Message sizes of every control-plane RPC, sized to what a legitimate peer can send
//! (not one large cap for all), and the check both ends run. tonic bounds decoding per
//! service; the service bound is the largest of its RPCs, and [`check`] holds every
//! other RPC to its own, smaller size before anything in it is used or logged.
//!
//! Also: how identifiers from the wire enter a span or a log line ([`span_id`]) —
//! only once they are valid, never as sent.

use prost::Message;

use super::convert::{MAX_ID_LEN, check_id};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// `RegisterWorker`: a few identifiers and versions.
pub const REGISTER_WORKER: usize = 4 * KIB;
/// `WatchSnapshots` request: IDs, a version and a checksum.
pub const WATCH_SNAPSHOTS: usize = KIB;
/// `AcknowledgeSnapshot`: IDs, a version, a checksum and a short reason.
pub const ACKNOWLEDGE: usize = 2 * KIB;
/// `ReportRuntime`: up to 20,000 counts (≤ ~170 bytes each with a 128-byte ID) and
/// the usage of a few routings.
pub const REPORT_RUNTIME: usize = 4 * MIB;
/// `ReportOutcomes`: up to 1,000 outcomes (≤ ~330 bytes each).
pub const REPORT_OUTCOMES: usize = 512 * KIB;
/// One snapshot (full or delta) sent to a worker: up to 100,000 proxies.
pub const SNAPSHOT: usize = 64 * MIB;
/// `RegisterChecker`.
pub const REGISTER_CHECKER: usize = 4 * KIB;
/// `StreamTasks` request.
pub const STREAM_TASKS: usize = KIB;
/// `ReportObservations`: up to 1,000 observations (≤ ~420 bytes each).
pub const REPORT_OBSERVATIONS: usize = 512 * KIB;
/// One check task sent to a checker (a proxy, its credentials, a target URL).
pub const CHECK_TASK: usize = 16 * KIB;

/// Largest request the worker service decodes (its largest RPC).
pub const WORKER_SERVICE_DECODE: usize = REPORT_RUNTIME;
/// Largest message the worker service encodes (a snapshot).
pub const WORKER_SERVICE_ENCODE: usize = SNAPSHOT;
/// Largest request the checker service decodes.
pub const CHECKER_SERVICE_DECODE: usize = REPORT_OBSERVATIONS;
/// Largest message the checker service encodes (a task).
pub const CHECKER_SERVICE_ENCODE: usize = CHECK_TASK;

/// A request larger than its RPC allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rpc}: message of {size} bytes is larger than its limit of {limit}")]
pub struct TooLarge {
    /// The RPC.
    pub rpc: &'static str,
    /// The message's encoded size.
    pub size: usize,
    /// The RPC's limit.
    pub limit: usize,
}

/// Holds `message` to `limit` bytes (its encoded size).
pub fn check<M: Message>(rpc: &'static str, message: &M, limit: usize) -> Result<(), TooLarge> {
    let size = message.encoded_len();
    if size > limit {
        Err(TooLarge { rpc, size, limit })
    } else {
        Ok(())
    }
}

/// An identifier as it may enter a span or a log line: itself when it is a valid
/// identifier (1..=128 bytes of `[A-Za-z0-9._:-]`), else a fixed marker — never
/// attacker-chosen bytes, newlines or megabytes.
pub fn span_id(value: &str) -> &str {
    if check_id("id", value).is_ok() {
        value
    } else if value.is_empty() {
        "-"
    } else {
        "<invalid>"
    }
}

/// Free text from the wire (a NACK reason) as it may enter a log line: printable
/// ASCII only, at most `max` characters.
pub fn log_text(value: &str, max: usize) -> String {
    value
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(max.min(MAX_ID_LEN * 4))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::pb;

    #[test]
    fn each_rpc_has_room_for_its_largest_legitimate_message() {
        let id = "x".repeat(MAX_ID_LEN);
        let counts = (0..20_000)
            .map(|i| pb::RuntimeCount {
                proxy_id: format!("{id}{i}")[..MAX_ID_LEN].to_owned(),
                assignment_epoch: u64::MAX,
                active: u32::MAX,
                reserved: u32::MAX,
                draining: true,
            })
            .collect();
        let report = pb::ReportRuntimeRequest {
            worker_id: id.clone(),
            session_id: id.clone(),
            report_sequence: u64::MAX,
            snapshot_version: u64::MAX,
            ownership_epoch: u64::MAX,
            counts,
            observed_at_ms: i64::MAX,
            usage: vec![],
        };
        assert!(check("ReportRuntime", &report, REPORT_RUNTIME).is_ok());
        let outcomes = pb::ReportOutcomesRequest {
            worker_id: id.clone(),
            session_id: id.clone(),
            batch_sequence: u64::MAX,
            outcomes: (0..1000)
                .map(|_| pb::Outcome {
                    proxy_id: id.clone(),
                    routing: id.clone(),
                    stage: 4,
                    success: true,
                    latency_ms: u64::MAX,
                    failure_code: "x".repeat(32),
                    observed_at_ms: i64::MAX,
                })
                .collect(),
        };
        assert!(check("ReportOutcomes", &outcomes, REPORT_OUTCOMES).is_ok());
        let observations = pb::ReportObservationsRequest {
            checker_id: id.clone(),
            session_id: id.clone(),
            observations: (0..1000)
                .map(|_| pb::Observation {
                    task_id: id.clone(),
                    proxy_id: id.clone(),
                    tier: 3,
                    success: true,
                    latency_ms: u64::MAX,
                    failure_code: "x".repeat(32),
                    egress_address: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".into(),
                    anonymity_leak: true,
                    routing: "x".repeat(63),
                    observed_at_ms: i64::MAX,
                })
                .collect(),
        };
        assert!(check("ReportObservations", &observations, REPORT_OBSERVATIONS).is_ok());
        let register = pb::RegisterWorkerRequest {
            worker_id: id.clone(),
            instance_id: id.clone(),
            zone: "z".repeat(63),
            gateway_group: "g".repeat(63),
            supported_protocol_versions: vec![1, 2, 3, 4],
            build_version: "v".repeat(64),
        };
        assert!(check("RegisterWorker", &register, REGISTER_WORKER).is_ok());
        let padded = pb::RegisterWorkerRequest {
            build_version: "v".repeat(REGISTER_WORKER),
            ..register
        };
        let err = check("RegisterWorker", &padded, REGISTER_WORKER).unwrap_err();
        assert_eq!(err.rpc, "RegisterWorker");
        assert!(err.size > REGISTER_WORKER);
    }

    #[test]
    fn only_valid_identifiers_enter_spans() {
        assert_eq!(span_id("gw-7.a:b_c"), "gw-7.a:b_c");
        assert_eq!(span_id(""), "-");
        assert_eq!(span_id("a\nlevel=ERROR forged"), "<invalid>");
        assert_eq!(span_id(&"a".repeat(MAX_ID_LEN + 1)), "<invalid>");
        assert_eq!(log_text("bad\nchecksum\u{1b}[31m", 64), "badchecksum[31m");
        assert_eq!(log_text(&"x".repeat(1000), 64).len(), 64);
    }
}
