//! [`TokenReviewer`] on `authentication.k8s.io/v1` `TokenReview` (RBAC: `create` on
//! `tokenreviews`).

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};

use crate::review::{
    POD_NAME_EXTRA, POD_UID_EXTRA, Review, ReviewUnavailable, ReviewedToken, TokenReviewer,
};

/// [`TokenReviewer`] backed by the API server. Error texts never contain the token.
#[derive(Clone)]
pub struct KubeTokenReviewer {
    api: Api<TokenReview>,
}

impl std::fmt::Debug for KubeTokenReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeTokenReviewer")
    }
}

impl KubeTokenReviewer {
    /// Reviews through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
        }
    }
}

#[async_trait]
impl TokenReviewer for KubeTokenReviewer {
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable> {
        let request = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Some(vec![audience.to_owned()]),
            },
            ..Default::default()
        };
        let reviewed = self
            .api
            .create(&PostParams::default(), &request)
            .await
            .map_err(|e| ReviewUnavailable(error_kind(&e)))?;
        read_answer(reviewed, audience)
    }
}

/// The one reading of the API server's answer (see the crate docs).
fn read_answer(reviewed: TokenReview, audience: &str) -> Result<Review, ReviewUnavailable> {
    // No status: a malformed answer. The review was not made; fail closed as
    // unavailable (503, never cached), never as an authentication.
    let Some(status) = reviewed.status else {
        return Err(ReviewUnavailable("TokenReview without status".into()));
    };
    if status.authenticated != Some(true) {
        return Ok(Review::Rejected);
    }
    let audiences = status.audiences.unwrap_or_default();
    // An authenticator that is not audience-aware leaves this empty: refused.
    if !audiences.iter().any(|a| a == audience) {
        return Ok(Review::Rejected);
    }
    let Some(user) = status.user else {
        return Ok(Review::Rejected);
    };
    let Some(username) = user.username.filter(|u| !u.is_empty()) else {
        return Ok(Review::Rejected);
    };
    let extra = user.extra.unwrap_or_default();
    let first = |k: &str| extra.get(k).and_then(|v| v.first()).cloned();
    Ok(Review::Authenticated(ReviewedToken {
        username,
        audiences,
        pod_name: first(POD_NAME_EXTRA),
        pod_uid: first(POD_UID_EXTRA),
    }))
}

/// A token-free description of a kube error.
fn error_kind(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("api status {}", s.code),
        _ => "transport".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};

    fn answer(status: Option<TokenReviewStatus>) -> TokenReview {
        TokenReview {
            status,
            ..Default::default()
        }
    }

    fn status(authenticated: bool, audiences: &[&str], user: Option<&str>) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated: Some(authenticated),
            audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
            user: Some(UserInfo {
                username: user.map(str::to_owned),
                extra: Some(
                    [
                        (POD_NAME_EXTRA.to_owned(), vec!["gw-1".to_owned()]),
                        (POD_UID_EXTRA.to_owned(), vec!["uid-1".to_owned()]),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_status_less_answer_is_unavailable_never_an_authentication() {
        assert!(read_answer(answer(None), "aud").is_err());
    }

    #[test]
    fn only_an_authenticated_user_for_our_audience_is_authenticated() {
        let ok = read_answer(answer(Some(status(true, &["aud"], Some("u")))), "aud");
        assert!(matches!(
            ok,
            Ok(Review::Authenticated(ReviewedToken { ref username, ref pod_name, ref pod_uid, .. }))
                if username == "u" && pod_name.as_deref() == Some("gw-1") && pod_uid.as_deref() == Some("uid-1")
        ));
        for s in [
            status(false, &["aud"], Some("u")),
            status(true, &[], Some("u")),
            status(true, &["kubernetes"], Some("u")),
            status(true, &["aud"], None),
            status(true, &["aud"], Some("")),
        ] {
            assert_eq!(
                read_answer(answer(Some(s)), "aud").ok(),
                Some(Review::Rejected)
            );
        }
    }
}
