//! The worker-identity bootstrap flags, defined once: the gateway and the checker
//! flatten [`IdentityArgs`] into their command lines (feature `args`).

use std::path::PathBuf;

use crate::client::ClientConfig;

/// `--identity-endpoint` and what it needs. Each binary states its own conflicts on
/// its side (e.g. its file-based mTLS flags `conflicts_with = "identity_endpoint"`).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentityArgs {
    /// Operator's identity issuance endpoint (`https://…`): the workload certificate is
    /// requested from it before connecting and renewed in memory at about half-life.
    #[arg(
        long,
        env = "PROXY_POOL_IDENTITY_ENDPOINT",
        requires_all = ["identity_token_file", "trust_bundle_file"]
    )]
    pub identity_endpoint: Option<String>,
    /// Projected ServiceAccount token (audience `proxy-pool-identity`), re-read on
    /// every issuance.
    #[arg(long, env = "PROXY_POOL_IDENTITY_TOKEN_FILE")]
    pub identity_token_file: Option<PathBuf>,
    /// The operator's trust bundle (PEM): verifies the issuance endpoint and the
    /// controller; re-read on every connection.
    #[arg(long, env = "PROXY_POOL_TRUST_BUNDLE_FILE")]
    pub trust_bundle_file: Option<PathBuf>,
    /// TLS name of the issuance endpoint, when it differs from the URL's host.
    #[arg(long)]
    pub identity_server_name: Option<String>,
}

/// Why the identity flags do not make a client configuration.
#[derive(Debug, thiserror::Error)]
pub enum IdentityArgsError {
    /// The endpoint without its token or trust bundle file.
    #[error("--identity-endpoint needs --identity-token-file and --trust-bundle-file")]
    Incomplete,
    /// The endpoint is not a URL.
    #[error("--identity-endpoint {0:?} is not a URL")]
    NotAUrl(String, #[source] http::uri::InvalidUri),
}

impl IdentityArgs {
    /// The endpoint, when given and not empty.
    pub fn endpoint(&self) -> Option<&str> {
        self.identity_endpoint.as_deref().filter(|e| !e.is_empty())
    }

    /// The issuance client's configuration when `--identity-endpoint` is given (not
    /// empty); `None` otherwise.
    pub fn client_config(&self) -> Result<Option<ClientConfig>, IdentityArgsError> {
        let Some(endpoint) = self.endpoint() else {
            return Ok(None);
        };
        let (Some(token), Some(bundle)) = (&self.identity_token_file, &self.trust_bundle_file)
        else {
            return Err(IdentityArgsError::Incomplete);
        };
        let uri: http::Uri = endpoint
            .parse()
            .map_err(|e| IdentityArgsError::NotAUrl(endpoint.to_owned(), e))?;
        let mut cfg = ClientConfig::new(uri, token.clone(), bundle.clone());
        cfg.server_name = self.identity_server_name.clone();
        Ok(Some(cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        identity: IdentityArgs,
    }

    #[test]
    fn the_endpoint_needs_its_files_and_makes_a_client_config() {
        let cli =
            |args: &[&str]| Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()));
        assert!(cli(&["--identity-endpoint", "https://op:8443"]).is_err());
        let ok = cli(&[
            "--identity-endpoint",
            "https://op:8443",
            "--identity-token-file",
            "/t",
            "--trust-bundle-file",
            "/b",
            "--identity-server-name",
            "op.svc",
        ])
        .map_err(|e| e.to_string());
        let cfg = ok
            .as_ref()
            .ok()
            .and_then(|c| c.identity.client_config().ok().flatten());
        assert!(
            matches!(cfg, Some(ref c) if c.server_name.as_deref() == Some("op.svc")
            && c.token_path == std::path::Path::new("/t")
            && c.ca_bundle_path == std::path::Path::new("/b")),
            "{ok:?}"
        );
        let none = IdentityArgs::default();
        assert!(matches!(none.client_config(), Ok(None)));
        let bad = IdentityArgs {
            identity_endpoint: Some("not a url".into()),
            identity_token_file: Some("/t".into()),
            trust_bundle_file: Some("/b".into()),
            identity_server_name: None,
        };
        assert!(matches!(
            bad.client_config(),
            Err(IdentityArgsError::NotAUrl(..))
        ));
    }
}
