//! The gateway's limits as command-line flags (each with an environment variable), so
//! that a gateway group can set them: connection caps, client timeouts, request-head
//! limits, and the load balancers trusted to send a PROXY protocol header.

use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use ipnet::IpNet;

use crate::config::GatewayConfig;
use crate::listener::TrustedSources;

/// Limit flags; absent ones keep [`GatewayConfig::default`]'s values.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitArgs {
    /// Open client connections in total (all listeners), 1 to 1,000,000.
    #[arg(long, env = "PROXY_POOL_GATEWAY_MAX_CONNECTIONS",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections: Option<usize>,
    /// Open client connections from one source address, 1 to 1,000,000.
    #[arg(long, env = "PROXY_POOL_GATEWAY_MAX_CONNECTIONS_PER_SOURCE",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub max_connections_per_source: Option<usize>,
    /// Time a client has to send its first request head or SOCKS5 handshake (and a load
    /// balancer its PROXY protocol header), 1 to 3,600.
    #[arg(long, env = "PROXY_POOL_GATEWAY_HANDSHAKE_TIMEOUT_SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub handshake_timeout_seconds: Option<u64>,
    /// Time a kept-alive client connection may sit idle between requests, 1 to 86,400.
    #[arg(long, env = "PROXY_POOL_GATEWAY_CLIENT_IDLE_TIMEOUT_SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub client_idle_timeout_seconds: Option<u64>,
    /// Time a tunnel or body transfer may see no bytes in either direction, 1 to 86,400.
    #[arg(long, env = "PROXY_POOL_GATEWAY_IO_IDLE_TIMEOUT_SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub io_idle_timeout_seconds: Option<u64>,
    /// Largest request head (request line, headers, blank line), 1 KiB to 1 MiB.
    #[arg(long, env = "PROXY_POOL_GATEWAY_MAX_REQUEST_HEAD_BYTES",
          value_parser = RangedU64ValueParser::<usize>::new().range(1024..=1024 * 1024))]
    pub max_request_head_bytes: Option<usize>,
    /// Most header fields in a request head (1 to 256).
    #[arg(long, env = "PROXY_POOL_GATEWAY_MAX_REQUEST_HEADERS",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub max_request_headers: Option<usize>,
    /// Address ranges (CIDR or IP) of load balancers whose connections start with a
    /// PROXY protocol v1/v2 header naming the real client. Connections from elsewhere
    /// are never read for one (a client cannot forge its address).
    #[arg(
        long,
        env = "PROXY_POOL_GATEWAY_PROXY_PROTOCOL_FROM",
        value_delimiter = ',',
        value_parser = parse_net
    )]
    pub proxy_protocol_from: Vec<IpNet>,
}

/// A CIDR, or a single address as its /32 or /128.
fn parse_net(value: &str) -> Result<IpNet, String> {
    let value = value.trim();
    value
        .parse::<IpNet>()
        .or_else(|_| value.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{value:?} is neither a CIDR nor an IP address"))
}

impl LimitArgs {
    /// Applies the given flags to `config` (validate it afterwards).
    pub fn apply(&self, config: &mut GatewayConfig) {
        let secs = Duration::from_secs;
        if let Some(n) = self.max_connections {
            config.max_connections = n;
        }
        if let Some(n) = self.max_connections_per_source {
            config.max_connections_per_source = n;
        }
        if let Some(s) = self.handshake_timeout_seconds {
            config.handshake_timeout = secs(s);
        }
        if let Some(s) = self.client_idle_timeout_seconds {
            config.client_idle_timeout = secs(s);
        }
        if let Some(s) = self.io_idle_timeout_seconds {
            config.io_idle_timeout = secs(s);
        }
        if let Some(n) = self.max_request_head_bytes {
            config.head.max_head_bytes = n;
        }
        if let Some(n) = self.max_request_headers {
            config.head.max_headers = n;
        }
        config.proxy_protocol = TrustedSources::new(self.proxy_protocol_from.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: LimitArgs,
    }

    fn parse(args: &[&str]) -> Result<GatewayConfig, String> {
        let cli = Cli::try_parse_from(std::iter::once("gateway").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let mut config = GatewayConfig::default();
        cli.limits.apply(&mut config);
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    #[test]
    fn flags_set_the_limits_and_absent_ones_keep_the_defaults() {
        assert_eq!(parse(&[]).unwrap(), GatewayConfig::default());
        let c = parse(&[
            "--max-connections=50",
            "--max-connections-per-source=5",
            "--handshake-timeout-seconds=3",
            "--client-idle-timeout-seconds=7",
            "--io-idle-timeout-seconds=9",
            "--max-request-head-bytes=4096",
            "--max-request-headers=20",
            "--proxy-protocol-from=10.0.0.0/8,192.0.2.7",
            "--proxy-protocol-from=2001:db8::/32",
        ])
        .unwrap();
        assert_eq!((c.max_connections, c.max_connections_per_source), (50, 5));
        assert_eq!(c.handshake_timeout, Duration::from_secs(3));
        assert_eq!(c.client_idle_timeout, Duration::from_secs(7));
        assert_eq!(c.io_idle_timeout, Duration::from_secs(9));
        assert_eq!((c.head.max_head_bytes, c.head.max_headers), (4096, 20));
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(c.proxy_protocol.trusts(ip("10.9.8.7")));
        assert!(c.proxy_protocol.trusts(ip("192.0.2.7")));
        assert!(!c.proxy_protocol.trusts(ip("192.0.2.8")));
        assert!(c.proxy_protocol.trusts(ip("2001:db8::1")));
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        let err = parse(&["--proxy-protocol-from=10.0.0.0/33"]).unwrap_err();
        assert!(err.contains("--proxy-protocol-from"), "{err}");
        assert!(err.contains("neither a CIDR nor an IP address"), "{err}");
        for flag in [
            "--max-connections=0",
            "--max-request-head-bytes=100",
            "--max-request-headers=300",
            "--handshake-timeout-seconds=0",
        ] {
            let err = parse(&[flag]).unwrap_err();
            let name = flag.split('=').next().unwrap_or_default();
            assert!(err.contains(name), "{flag}: {err}");
        }
    }
}
