//! The gRPC control plane against oversized and hostile messages: every RPC is held to
//! the size its largest legitimate message needs (not one 64 MiB cap for all), and
//! identifiers are validated before they enter a span or a log line.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use controlplane_support::*;
use proxy_pool_api::controlplane::limits;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::checker_control_plane_client::CheckerControlPlaneClient;
use proxy_pool_e2e::logs::LogCapture;
use tonic::Code;

/// Room for a client to send what the server must refuse.
const HUGE: usize = 256 * 1024 * 1024;

#[tokio::test]
async fn every_rpc_is_held_to_its_own_size() {
    let h = Harness::new(Kind::Memory).await;
    let mut client = h.client().await.max_encoding_message_size(HUGE);
    // RegisterWorker: a few identifiers; 8 KiB of "version" is refused before use.
    let fat = pb::RegisterWorkerRequest {
        build_version: "v".repeat(8 * 1024),
        ..register_req("gw-fat", "i-1")
    };
    let err = client.register_worker(fat).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("RegisterWorker_too_large"),
        "{err:?}"
    );
    // Past the service's largest RPC (ReportRuntime, 4 MiB) nothing is even decoded.
    let w = Worker::register(&h, "gw-1").await;
    let big = pb::ReportRuntimeRequest {
        worker_id: "gw-1".into(),
        session_id: w.session.clone(),
        report_sequence: 1,
        counts: (0..60_000)
            .map(|i| pb::RuntimeCount {
                proxy_id: format!("{:0>120}", i),
                assignment_epoch: 1,
                active: 1,
                reserved: 0,
                draining: false,
            })
            .collect(),
        ..Default::default()
    };
    assert!(limits::check("x", &big, limits::REPORT_RUNTIME).is_err());
    let mut raw = w.client.clone().max_encoding_message_size(HUGE);
    let err = raw.report_runtime(big).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );
    // A legitimate registration still works.
    let ok = client.register_worker(register_req("gw-2", "i-1")).await;
    assert!(ok.is_ok(), "{ok:?}");
    drop(w);
}

#[tokio::test]
async fn checker_rpcs_are_held_to_their_sizes() {
    let h = Harness::new(Kind::Memory).await;
    let mut client =
        CheckerControlPlaneClient::new(h.channel().await).max_encoding_message_size(HUGE);
    let fat = pb::RegisterCheckerRequest {
        checker_id: "c-1".into(),
        instance_id: "x".repeat(16 * 1024),
        max_concurrency: 1,
        tiers: vec![1],
        supported_protocol_versions: vec![1],
    };
    let err = client.register_checker(fat).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("RegisterChecker_too_large"),
        "{err:?}"
    );
    let flood = pb::ReportObservationsRequest {
        checker_id: "c-1".into(),
        session_id: "s".into(),
        observations: (0..20_000)
            .map(|_| pb::Observation {
                task_id: "t".repeat(100),
                proxy_id: "p".repeat(100),
                ..Default::default()
            })
            .collect(),
    };
    let err = client.report_observations(flood).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn hostile_identifiers_never_reach_a_span_or_a_log_line() {
    let capture = LogCapture::default();
    let _guard = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(capture.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(_guard);
    let h = Harness::new(Kind::Memory).await;
    let mut client = h.client().await;
    let forged = "gw-1\nlevel=ERROR msg=\"forged line\" FORGED";
    let err = client
        .register_worker(register_req(forged, "i-1"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let huge_id = "w".repeat(100_000);
    let big = pb::RegisterWorkerRequest {
        worker_id: huge_id.clone(),
        ..register_req("x", "i-1")
    };
    let _ = client
        .max_encoding_message_size(HUGE)
        .register_worker(big)
        .await;
    // A NACK reason is logged only as printable text.
    let mut w = Worker::watching(&h, "gw-ok").await;
    let _ = w.apply_next().await;
    let header = w.state.header().expect("snapshot");
    let nack = pb::AcknowledgeSnapshotRequest {
        worker_id: "gw-ok".into(),
        session_id: w.session.clone(),
        version: header.version,
        ownership_epoch: header.ownership_epoch,
        checksum: w.state.checksum().0.to_vec(),
        accepted: false,
        reason: "bad\nlevel=ERROR NACKFORGED\u{1b}[31m".into(),
    };
    w.client
        .acknowledge_snapshot(nack)
        .await
        .expect("NACK accepted");
    let text = capture.text_lossy();
    assert!(text.contains("negative snapshot ACK"), "{text}");
    assert!(!text.contains("msg=\"forged line\""), "{text}");
    assert!(
        text.lines()
            .all(|l| !l.trim_start().starts_with("level=ERROR")),
        "a forged line: {text}"
    );
    assert!(
        !text.contains(&huge_id[..1000]),
        "an unbounded ID was logged"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
}

/// Whether the server closed `s` within `within` (EOF or reset on read).
async fn closed(s: &mut tokio::net::TcpStream, within: std::time::Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut b = [0u8; 64];
    loop {
        match tokio::time::timeout(within, s.read(&mut b)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn silent_and_excess_connections_are_closed_and_workers_still_served() {
    use proxy_pool_controller::controlplane::incoming::{FIRST_BYTES, Limits};
    let h = Harness::new(Kind::Memory).await;
    let addr: std::net::SocketAddr = h.endpoint.trim_start_matches("http://").parse().unwrap();
    let limits = Limits::default();
    // One source opens more than its share and sends nothing.
    let mut silent = Vec::new();
    for _ in 0..(limits.max_per_source + 10) {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let mut refused = 0;
    for s in &mut silent[limits.max_per_source..] {
        refused += usize::from(closed(s, std::time::Duration::from_secs(2)).await);
    }
    assert_eq!(refused, 10, "over the per-source cap: closed at accept");
    // Another source registers meanwhile.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(h.endpoint.clone())
        .unwrap()
        .connect_with_connector(tower::service_fn({
            let cell = std::sync::Arc::new(tokio::sync::Mutex::new(Some(stream)));
            move |_: tonic::transport::Uri| {
                let cell = cell.clone();
                async move {
                    let s = cell
                        .lock()
                        .await
                        .take()
                        .ok_or(std::io::ErrorKind::NotConnected)?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }
        }))
        .await
        .unwrap();
    let mut other = pb::worker_control_plane_client::WorkerControlPlaneClient::new(channel);
    assert!(
        other
            .register_worker(register_req("gw-other", "i-1"))
            .await
            .is_ok()
    );
    // The silent ones are closed at the first-bytes deadline (nothing, or less than
    // the HTTP/2 preface, arrived).
    let _ = FIRST_BYTES;
    for s in &mut silent[..limits.max_per_source] {
        assert!(
            closed(s, limits.first_bytes + std::time::Duration::from_secs(5)).await,
            "a silent connection stayed open"
        );
    }
}
