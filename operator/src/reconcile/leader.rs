//! Leader election on a `coordination.k8s.io/v1` Lease, so two operator replicas never
//! reconcile at once.
//!
//! The client-go protocol: a replica takes the Lease when it is free or its holder
//! stopped renewing for `leaseDurationSeconds`, and renews it every third of that.
//! Every write is a `replace` carrying the read `resourceVersion`, so of two replicas
//! racing for an expired Lease exactly one wins (the other gets 409 Conflict). A leader
//! that cannot renew in time stops reconciling before another may take over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};

use super::Error;

/// One replica's handle on the Lease.
#[derive(Clone, Debug)]
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

impl LeaseLock {
    /// A lock on Lease `name` held as `identity` (the pod name) for `duration`.
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Self {
            api,
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    /// How long the Lease lasts without renewal.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Takes or renews the Lease; `Ok(false)` when another replica holds it.
    pub async fn try_acquire(&self) -> Result<bool, Error> {
        let now = Timestamp::now();
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && !expired(&spec, now) {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let (acquired, transitions) = match (ours, spec.acquire_time) {
            (true, Some(MicroTime(t))) => (t, transitions),
            _ => (now, transitions.saturating_add(1)),
        };
        let mut lease = current;
        lease.spec = Some(self.spec(acquired, now, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives the Lease up (if still ours) so a standby takes over at once.
    pub async fn release(&self) -> Result<(), Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.acquire_time = None;
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// Whether the holder stopped renewing more than `leaseDurationSeconds` ago.
fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time else {
        return true;
    };
    let secs = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    renewed
        .checked_add(SignedDuration::from_secs(secs))
        .map_or(true, |deadline| deadline < now)
}

/// Keeps renewing the Lease; returns when it is lost (another holder, or no successful
/// renewal for two thirds of the duration, leaving a margin before others may take it).
pub async fn hold(lock: &LeaseLock) {
    let period = lock.duration / 3;
    let deadline = lock.duration * 2 / 3;
    let mut last_ok = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(period).await;
        match lock.try_acquire().await {
            Ok(true) => last_ok = tokio::time::Instant::now(),
            Ok(false) => {
                tracing::warn!(lease = %lock.name, "another replica took the Lease");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, lease = %lock.name, "cannot renew the Lease");
                if last_ok.elapsed() >= deadline {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_after_its_duration() {
        let now = Timestamp::now();
        let spec = |ago: i64| LeaseSpec {
            renew_time: Some(MicroTime(now - SignedDuration::from_secs(ago))),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        assert!(!expired(&spec(5), now));
        assert!(expired(&spec(20), now));
        assert!(expired(&LeaseSpec::default(), now));
    }
}
