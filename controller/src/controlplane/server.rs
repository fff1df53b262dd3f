//! The gRPC listener: transport security, limits (connections in total and per source,
//! a deadline for the first bytes and for the TLS handshake — [`super::incoming`] —,
//! message sizes per RPC, streams, keepalive), graceful shutdown.

use std::future::Future;
use std::sync::Arc;

use proxy_pool_api::controlplane::limits as sizes;
use proxy_pool_api::controlplane::model::Secret;
use proxy_pool_api::controlplane::pb::checker_control_plane_server::CheckerControlPlaneServer;
use proxy_pool_api::controlplane::pb::worker_control_plane_server::WorkerControlPlaneServer;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Status};

use crate::leadership::Leadership;
pub use proxy_pool_api::controlplane::NOT_LEADER;

use super::ControlPlane;
use super::checker::CheckerService;
use super::identity::Authenticator;
use super::worker::WorkerService;

/// Deadline of a client's TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The controller's TLS material and the identities it accepts.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// Server certificate chain (PEM).
    pub cert_pem: String,
    /// Server key (PEM).
    pub key_pem: Secret,
    /// Trust bundle client certificates are verified against (PEM).
    pub client_ca_pem: String,
    /// SPIFFE trust domain of accepted clients.
    pub trust_domain: String,
    /// Environment segment of accepted clients.
    pub environment: String,
}

/// How the listener is secured.
#[derive(Clone, Debug)]
pub enum Transport {
    /// mTLS with SPIFFE identities (clusters).
    Mtls(ServerTls),
    /// Plaintext on a loopback listener, explicitly configured as a test fixture.
    LoopbackFixture,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Plaintext requested on a non-loopback listener.
    #[error("plaintext control plane is allowed only on a loopback listener")]
    PlaintextNotLoopback,
    /// Listener or TLS setup failed.
    #[error("control-plane listener: {0}")]
    Io(#[from] std::io::Error),
    /// The transport failed.
    #[error("control-plane transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Refuses every call with `UNAVAILABLE not_leader` unless this replica leads: the
/// snapshot publisher and the check queue live in the leader only. Clients rotate to
/// another controller endpoint (`api::controlplane::client`).
fn leader_only(
    leadership: Leadership,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req| {
        if leadership.is_leader() {
            Ok(req)
        } else {
            Err(Status::unavailable(NOT_LEADER))
        }
    }
}

/// Serves both control-plane services on `listener` until `shutdown` completes, then
/// ends every open stream and lets in-flight calls finish (the caller bounds the
/// grace period).
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    control_plane: Arc<ControlPlane>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let limits = control_plane.shared.config.limits.clone();
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .max_concurrent_streams(Some(limits.max_concurrent_streams_per_connection))
        .tcp_keepalive(Some(limits.keepalive_interval))
        .timeout(limits.request_timeout);
    let auth = match transport {
        Transport::LoopbackFixture => {
            if !listener.local_addr()?.ip().is_loopback() {
                return Err(ServeError::PlaintextNotLoopback);
            }
            tracing::warn!("control plane serving plaintext on a loopback test fixture");
            Authenticator::LoopbackFixture
        }
        Transport::Mtls(tls) => {
            builder = builder.tls_config(
                ServerTlsConfig::new()
                    .identity(Identity::from_pem(&tls.cert_pem, tls.key_pem.expose()))
                    .client_ca_root(Certificate::from_pem(&tls.client_ca_pem))
                    .client_auth_optional(false)
                    .timeout(TLS_HANDSHAKE_TIMEOUT),
            )?;
            Authenticator::Spiffe {
                trust_domain: tls.trust_domain,
                environment: tls.environment,
            }
        }
    };
    let shared = control_plane.shared();
    // Each service decodes at most its largest RPC's request (every RPC is held to its
    // own size in its handler) and encodes at most its largest message.
    let worker = WorkerControlPlaneServer::new(WorkerService::new(shared.clone(), auth.clone()))
        .max_decoding_message_size(sizes::WORKER_SERVICE_DECODE)
        .max_encoding_message_size(sizes::WORKER_SERVICE_ENCODE);
    let checker = CheckerControlPlaneServer::new(CheckerService::new(shared, auth))
        .max_decoding_message_size(sizes::CHECKER_SERVICE_DECODE)
        .max_encoding_message_size(sizes::CHECKER_SERVICE_ENCODE);
    let gate = leader_only(control_plane.leadership().clone());
    let worker = InterceptedService::new(worker, gate.clone());
    let checker = InterceptedService::new(checker, gate);
    let cp = control_plane.clone();
    let signal = async move {
        shutdown.await;
        cp.close_streams();
    };
    builder
        .add_service(worker)
        .add_service(checker)
        .serve_with_incoming_shutdown(
            super::incoming::bounded(listener, super::incoming::Limits::default()),
            signal,
        )
        .await?;
    Ok(())
}
