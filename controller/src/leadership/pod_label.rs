//! The leader's pod label (`leadership.kubernetes.labelPod`): a replica labels its own
//! pod `proxypool.io/leader=false` when it starts, `true` once it leads, and `false`
//! again when it is deposed or stops, so a Service selecting `proxypool.io/leader=true`
//! reaches the leader alone. A replica whose process died without unlabelling is either
//! gone with its pod, or restarted in the same pod and unlabels itself first thing.
//! It patches only the one pod it was given, and only that label.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use proxy_pool_api::config::LEADER_POD_LABEL;

use super::Leadership;

/// Attempts of a `false` write (start-up, deposition) before giving up.
const UNLABEL_TRIES: u32 = 3;
/// Pause between attempts.
const RETRY: Duration = Duration::from_millis(500);
/// Time limit of one patch.
const PATCH_TIMEOUT: Duration = Duration::from_secs(5);

/// This replica's own pod.
#[derive(Clone)]
pub struct PodLabel {
    api: Api<Pod>,
    pod: String,
}

impl std::fmt::Debug for PodLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodLabel")
            .field("pod", &self.pod)
            .finish_non_exhaustive()
    }
}

impl PodLabel {
    /// Pod `pod` of `api`'s namespace.
    pub fn new(api: Api<Pod>, pod: &str) -> Self {
        Self {
            api,
            pod: pod.into(),
        }
    }

    /// Sets the label to `leader`.
    pub async fn set(&self, leader: bool) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "metadata": { "labels": { LEADER_POD_LABEL: if leader { "true" } else { "false" } } }
        });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let call = self.api.patch(&self.pod, &params, &patch);
        match tokio::time::timeout(PATCH_TIMEOUT, call).await {
            Ok(r) => r.map(drop),
            Err(_) => Err(kube::Error::Service("pod label patch timed out".into())),
        }
    }

    /// Keeps the label in step with `leadership` until this replica is deposed (or
    /// will never lead): `false` now, `true` once elected (retried until it sticks or
    /// the replica is deposed), `false` when deposed.
    pub async fn follow(self, leadership: Leadership) {
        self.unlabel().await;
        if !leadership.elected().await {
            return;
        }
        loop {
            tokio::select! {
                () = leadership.deposed() => break,
                r = self.set(true) => match r {
                    Ok(()) => {
                        tracing::info!(pod = %self.pod, "leader pod labelled");
                        leadership.deposed().await;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, pod = %self.pod, "cannot label the leader pod");
                        tokio::time::sleep(RETRY).await;
                    }
                },
            }
        }
        self.unlabel().await;
    }

    async fn unlabel(&self) {
        for _ in 0..UNLABEL_TRIES {
            match self.set(false).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(error = %e, pod = %self.pod, "cannot unlabel the pod");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
}
