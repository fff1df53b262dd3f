//! SPIFFE workload identities of the control plane:
//! `spiffe://<trust-domain>/<environment>/worker/<worker-id>` for gateway workers and
//! `spiffe://<trust-domain>/<environment>/checker/<checker-id>` for checkers.

use std::fmt;

use super::convert::check_id;

/// What kind of workload an identity names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// A gateway worker.
    Worker,
    /// A health checker.
    Checker,
}

impl WorkloadKind {
    /// Path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Checker => "checker",
        }
    }
}

/// A parsed control-plane SPIFFE ID.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpiffeId {
    /// Trust domain (DNS-like name).
    pub trust_domain: String,
    /// Environment segment.
    pub environment: String,
    /// Workload kind.
    pub kind: WorkloadKind,
    /// Worker or checker ID.
    pub id: String,
}

/// A URI that is not a control-plane SPIFFE ID.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a control-plane SPIFFE ID: {0}")]
pub struct SpiffeError(&'static str);

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'_')
        })
}

impl SpiffeId {
    /// Parses `spiffe://<trust-domain>/<environment>/<worker|checker>/<id>`.
    pub fn parse(uri: &str) -> Result<Self, SpiffeError> {
        let rest = uri
            .strip_prefix("spiffe://")
            .ok_or(SpiffeError("scheme must be spiffe"))?;
        let mut parts = rest.split('/');
        let (Some(td), Some(env), Some(kind), Some(id), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(SpiffeError("path must be /<environment>/<kind>/<id>"));
        };
        if !segment_ok(td) || !segment_ok(env) {
            return Err(SpiffeError("bad trust domain or environment"));
        }
        let kind = match kind {
            "worker" => WorkloadKind::Worker,
            "checker" => WorkloadKind::Checker,
            _ => return Err(SpiffeError("kind must be worker or checker")),
        };
        check_id("spiffe id", id).map_err(|_| SpiffeError("bad workload id"))?;
        Ok(Self {
            trust_domain: td.to_owned(),
            environment: env.to_owned(),
            kind,
            id: id.to_owned(),
        })
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spiffe://{}/{}/{}/{}",
            self.trust_domain,
            self.environment,
            self.kind.as_str(),
            self.id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let s = "spiffe://proxy-pool.local/prod/worker/gw-0";
        let id = SpiffeId::parse(s).unwrap();
        assert_eq!(id.kind, WorkloadKind::Worker);
        assert_eq!(id.id, "gw-0");
        assert_eq!(id.to_string(), s);
        assert!(SpiffeId::parse("spiffe://td/prod/admin/x").is_err());
        assert!(SpiffeId::parse("spiffe://td/prod/worker/x/y").is_err());
        assert!(SpiffeId::parse("https://td/prod/worker/x").is_err());
    }
}
