//! Who is calling: the SPIFFE URI of the verified mTLS client certificate, checked
//! against the worker / checker ID of every message. Plaintext is accepted only by a
//! server started as a loopback test fixture ([`Transport::LoopbackFixture`]).
//!
//! [`Transport::LoopbackFixture`]: super::Transport::LoopbackFixture

use proxy_pool_api::controlplane::spiffe::{SpiffeId, WorkloadKind};
use tonic::Request;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::error::{ControlPlaneError, CpResult};

/// How callers are authenticated.
#[derive(Clone, Debug)]
pub enum Authenticator {
    /// mTLS: the leaf must carry exactly one URI SAN in this trust domain/environment.
    Spiffe {
        /// Trust domain.
        trust_domain: String,
        /// Environment segment.
        environment: String,
    },
    /// Loopback test fixture: IDs in messages are trusted as sent.
    LoopbackFixture,
}

impl Authenticator {
    /// Checks that the caller is the `kind` workload `id`.
    pub fn authorize<T>(&self, req: &Request<T>, kind: WorkloadKind, id: &str) -> CpResult<()> {
        match self {
            Self::LoopbackFixture => Ok(()),
            Self::Spiffe {
                trust_domain,
                environment,
            } => {
                let certs = req.peer_certs().ok_or(ControlPlaneError::Unauthenticated(
                    "client certificate required",
                ))?;
                let leaf = certs.first().ok_or(ControlPlaneError::Unauthenticated(
                    "client certificate required",
                ))?;
                let sid = spiffe_of(leaf.as_ref())?;
                if sid.trust_domain != *trust_domain
                    || sid.environment != *environment
                    || sid.kind != kind
                    || sid.id != id
                {
                    tracing::info!(
                        certificate = %sid,
                        claimed = id,
                        kind = kind.as_str(),
                        "control-plane identity mismatch"
                    );
                    return Err(ControlPlaneError::IdentityMismatch);
                }
                Ok(())
            }
        }
    }
}

/// The SPIFFE ID of a DER certificate: exactly one URI SAN, a control-plane ID.
pub fn spiffe_of(der: &[u8]) -> CpResult<SpiffeId> {
    let (_, cert) = X509Certificate::from_der(der)
        .map_err(|_| ControlPlaneError::Unauthenticated("unreadable client certificate"))?;
    let san = cert.subject_alternative_name().ok().flatten().ok_or(
        ControlPlaneError::Unauthenticated("certificate has no SPIFFE URI"),
    )?;
    let mut uris = san.value.general_names.iter().filter_map(|n| match n {
        GeneralName::URI(u) => Some(*u),
        _ => None,
    });
    let (Some(uri), None) = (uris.next(), uris.next()) else {
        return Err(ControlPlaneError::Unauthenticated(
            "certificate must carry exactly one URI SAN",
        ));
    };
    SpiffeId::parse(uri)
        .map_err(|_| ControlPlaneError::Unauthenticated("certificate URI is not a SPIFFE ID"))
}
