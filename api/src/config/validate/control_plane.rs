//! `controlPlane`: how the listener is secured and the ownership / snapshot tunables.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::ctx::Ctx;
use crate::config::duration::show;
use crate::config::raw::RawControlPlane;
use crate::config::types::{ControlPlaneConfig, ControlPlaneTls, ControlPlaneTransport};

/// `controlPlane.loopbackPlaintext` / `controlPlane.tls`: plaintext only on a loopback
/// listener, never together with TLS; TLS needs its three files.
pub(super) fn control_plane_transport(
    cx: &mut Ctx,
    raw: &RawControlPlane,
    listen: SocketAddr,
) -> ControlPlaneTransport {
    match (&raw.tls, raw.loopback_plaintext) {
        (Some(_), true) => {
            cx.err(
                "controlPlane.loopbackPlaintext",
                "cannot be combined with controlPlane.tls",
            );
            ControlPlaneTransport::Unconfigured
        }
        (None, true) => {
            if !listen.ip().is_loopback() {
                cx.err(
                    "controlPlane.loopbackPlaintext",
                    "plaintext is allowed only on a loopback listen address",
                );
            }
            ControlPlaneTransport::LoopbackPlaintext
        }
        (Some(t), false) => {
            let mut file = |field: &str, v: &str| {
                if v.trim().is_empty() {
                    cx.err(format!("controlPlane.tls.{field}"), "is required");
                }
                PathBuf::from(v)
            };
            let cert_file = file("certFile", &t.cert_file);
            let key_file = file("keyFile", &t.key_file);
            let client_ca_file = file("clientCaFile", &t.client_ca_file);
            let mut name = |field: &str, v: &Option<String>, default: &str| {
                let v = v.clone().unwrap_or_else(|| default.to_owned());
                if v.is_empty() || v.contains('/') || v.chars().any(char::is_whitespace) {
                    cx.err(
                        format!("controlPlane.tls.{field}"),
                        "must be a non-empty name without '/' or spaces",
                    );
                }
                v
            };
            let trust_domain = name("trustDomain", &t.trust_domain, "proxy-pool.local");
            let environment = name("environment", &t.environment, "default");
            ControlPlaneTransport::Mtls(ControlPlaneTls {
                cert_file,
                key_file,
                client_ca_file,
                trust_domain,
                environment,
            })
        }
        (None, false) => ControlPlaneTransport::Unconfigured,
    }
}

/// The control plane's tunables (`controlPlane.*` beyond the listener), each checked
/// with its path; `drainWait` must leave the Distribution request time to answer.
pub(super) fn control_plane_tunables(
    cx: &mut Ctx,
    raw: &RawControlPlane,
    listen: SocketAddr,
    transport: ControlPlaneTransport,
    request_timeout: Duration,
) -> ControlPlaneConfig {
    let secs = Duration::from_secs;
    let lease = cx.duration_in(
        "controlPlane.lease",
        raw.lease.as_deref(),
        secs(30),
        secs(5)..=secs(3600),
    );
    let renew_before = cx.duration_in(
        "controlPlane.renewBefore",
        raw.renew_before.as_deref(),
        secs(15),
        secs(2)..=secs(3600),
    );
    let snapshot_validity = cx.duration_in(
        "controlPlane.snapshotValidity",
        raw.snapshot_validity.as_deref(),
        secs(30),
        secs(2)..=secs(3600),
    );
    let max_stale_age = cx.duration_in(
        "controlPlane.maxStaleAge",
        raw.max_stale_age.as_deref(),
        secs(60),
        secs(1)..=secs(3600),
    );
    let report_interval = cx.duration_in(
        "controlPlane.reportInterval",
        raw.report_interval.as_deref(),
        secs(5),
        Duration::from_millis(100)..=secs(60),
    );
    let drain_wait = cx.duration_in(
        "controlPlane.drainWait",
        raw.drain_wait.as_deref(),
        secs(5),
        Duration::ZERO..=secs(60),
    );
    if renew_before >= lease {
        cx.err(
            "controlPlane.renewBefore",
            format!("must be shorter than controlPlane.lease ({})", show(lease)),
        );
    }
    if !drain_wait.is_zero() && drain_wait >= request_timeout {
        cx.err(
            "controlPlane.drainWait",
            format!(
                "must be shorter than distribution.limits.requestTimeout ({})",
                show(request_timeout)
            ),
        );
    }
    let slots = raw.target_slots_per_worker.unwrap_or(10_000);
    if !(1..=10_000_000).contains(&slots) {
        cx.err(
            "controlPlane.targetSlotsPerWorker",
            format!("must be between 1 and 10000000, got {slots}"),
        );
    }
    ControlPlaneConfig {
        listen,
        transport,
        extraction_reserve: cx.range(
            "controlPlane.extractionReserve",
            raw.extraction_reserve,
            0,
            0,
            10_000,
        ),
        target_slots_per_worker: slots.clamp(1, 10_000_000),
        drain_batch: cx.range("controlPlane.drainBatch", raw.drain_batch, 64, 1, 10_000),
        drain_wait,
        lease,
        renew_before: renew_before.min(lease),
        snapshot_validity,
        max_stale_age,
        report_interval,
    }
}
