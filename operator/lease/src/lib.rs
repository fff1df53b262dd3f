//! Leader election on a `coordination.k8s.io/v1` Lease, the one implementation behind
//! the operator's replicas (`proxy-pool-operator`) and the controller's `kubernetes`
//! leadership backend (`proxy-pool-controller`, which adds a fencing token from Redis).
//!
//! The client-go protocol: a holder takes the Lease when it is free (absent, released)
//! or its holder stopped renewing for `leaseDurationSeconds`, and renews it well within
//! that. Every write is a `replace` carrying the `resourceVersion` it read, so of two
//! candidates racing for one Lease exactly one wins (the other gets 409 Conflict and is
//! told the Lease is held). A holder may attach a token to its tenure (annotation
//! [`TOKEN_ANNOTATION`]); a fresh tenure starts without one, and renewals and releases
//! can be made conditional on it.
//!
//! It owns no timing policy beyond the Lease's own fields (callers decide when to renew
//! and when to give up), and never reads anything but the one named Lease.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};

/// The annotation holding the current tenure's token, when its holder attached one.
pub const TOKEN_ANNOTATION: &str = "proxypool.io/fencing-token";

/// The answer to [`LeaseLock::try_acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The Lease was free or expired: a new tenure for the caller, with no token.
    Taken,
    /// The caller held it already and renewed it; its tenure's token, if attached.
    Renewed {
        /// The token attached to this tenure ([`LeaseLock::set_token`]).
        token: Option<String>,
    },
    /// Another holder has a live Lease (or won a race for it).
    Held,
}

/// One named Lease, taken and renewed by holders given per call.
#[derive(Clone, Debug)]
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
}

impl LeaseLock {
    /// The Lease `name` of `api`'s namespace.
    pub fn new(api: Api<Lease>, name: &str) -> Self {
        Self {
            api,
            name: name.into(),
        }
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes the Lease for `holder` for `duration` (rounded up to whole seconds) when
    /// it is free or expired, or renews it when `holder` has it.
    pub async fn try_acquire(
        &self,
        holder: &str,
        duration: Duration,
    ) -> Result<Acquired, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(holder, duration, now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Acquired::Taken),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Acquired::Held),
                Err(e) => Err(e),
            };
        };
        let current = lease.spec.clone().unwrap_or_default();
        let current_holder = current.holder_identity.as_deref().unwrap_or("");
        let ours = current_holder == holder;
        if !ours && !current_holder.is_empty() && !expired(&current, now) {
            return Ok(Acquired::Held);
        }
        let answer = if ours {
            lease.spec = Some(renewed(&current, holder, duration, now));
            Acquired::Renewed {
                token: token_of(&lease).map(str::to_owned),
            }
        } else {
            let transitions = current.lease_transitions.unwrap_or(0).saturating_add(1);
            lease.spec = Some(spec(holder, duration, now, now, transitions));
            set_annotation(&mut lease, None);
            Acquired::Taken
        };
        Ok(if self.replace(&lease).await? {
            answer
        } else {
            Acquired::Held
        })
    }

    /// Renews `holder`'s tenure for `duration`; with `token`, only the tenure carrying
    /// that token. `false` when it is not (or no longer) that tenure.
    pub async fn renew(
        &self,
        holder: &str,
        token: Option<&str>,
        duration: Duration,
    ) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.tenure(holder, token).await? else {
            return Ok(false);
        };
        let current = lease.spec.take().unwrap_or_default();
        lease.spec = Some(renewed(&current, holder, duration, Timestamp::now()));
        self.replace(&lease).await
    }

    /// Attaches `token` to `holder`'s current tenure; `false` when `holder` no longer
    /// has the Lease.
    pub async fn set_token(&self, holder: &str, token: &str) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.tenure(holder, None).await? else {
            return Ok(false);
        };
        set_annotation(&mut lease, Some(token));
        self.replace(&lease).await
    }

    /// Gives the Lease up (so a standby takes over at once) if `holder` still has it
    /// (with `token`: under that token). `false` when there was nothing to give up.
    pub async fn release(&self, holder: &str, token: Option<&str>) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.tenure(holder, token).await? else {
            return Ok(false);
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
            spec.acquire_time = None;
        }
        set_annotation(&mut lease, None);
        self.replace(&lease).await
    }

    /// The Lease when `holder` has it (and `token` is its tenure's, when given).
    async fn tenure(
        &self,
        holder: &str,
        token: Option<&str>,
    ) -> Result<Option<Lease>, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            return Ok(None);
        };
        let held = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(holder);
        let same = token.is_none_or(|t| token_of(&lease) == Some(t));
        Ok((held && same).then_some(lease))
    }

    /// Replaces the Lease at the `resourceVersion` it was read at; `false` on a
    /// conflict (someone wrote it in between).
    async fn replace(&self, lease: &Lease) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.name, &PostParams::default(), lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn spec(
    holder: &str,
    duration: Duration,
    acquired: Timestamp,
    renewed: Timestamp,
    transitions: i32,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_owned()),
        lease_duration_seconds: Some(whole_seconds(duration)),
        acquire_time: Some(MicroTime(acquired)),
        renew_time: Some(MicroTime(renewed)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    }
}

/// `current` renewed by its holder at `now`: the same tenure (its acquire time and
/// transitions kept).
fn renewed(current: &LeaseSpec, holder: &str, duration: Duration, now: Timestamp) -> LeaseSpec {
    let acquired = current.acquire_time.as_ref().map_or(now, |MicroTime(t)| *t);
    let transitions = current.lease_transitions.unwrap_or(0);
    spec(holder, duration, acquired, now, transitions)
}

/// `duration` in whole seconds, rounded up (others wait at least that long), ≥ 1.
fn whole_seconds(duration: Duration) -> i32 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

fn token_of(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TOKEN_ANNOTATION))
        .map(String::as_str)
}

fn set_annotation(lease: &mut Lease, token: Option<&str>) {
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match token {
        Some(t) => {
            annotations.insert(TOKEN_ANNOTATION.into(), t.into());
        }
        None => {
            annotations.remove(TOKEN_ANNOTATION);
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

    #[test]
    fn durations_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(2_500)), 3);
        assert_eq!(whole_seconds(Duration::from_secs(10)), 10);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
    }
}
