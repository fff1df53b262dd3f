//! The exclusivity auditor: every use of a simulated proxy — a `CONNECT` or SOCKS5
//! tunnel, a forwarded request — with where it came from (the client's source address)
//! and when it started and ended, and the check built on it: once a proxy was handed
//! to an extraction client, nobody else may still be using it or use it again.
//!
//! Who is who is the caller's knowledge: extraction clients connect from their own
//! loopback source addresses (say `127.0.0.2`), gateways from any other. Handouts are
//! reported by the test (`POST /v1/sim/audit/handouts`) as it receives them; a
//! client's first use of a proxy counts as a handout too. A handout names a port, and
//! ports are reused by later proxies once one expires: the verdict judges each handout
//! against the proxy that had the port then (the one the client used next), never
//! against a later proxy on the same port.
//!
//! Bounded: at most `MAX_USES` uses are kept; past that, uses are counted as dropped
//! and every verdict says it is incomplete. Times are Unix milliseconds of this host.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Most uses kept.
pub const MAX_USES: usize = 1_000_000;
/// Most handouts kept.
pub const MAX_HANDOUTS: usize = 200_000;
/// Most violations listed in one verdict (all are counted).
pub const MAX_LISTED: usize = 100;

/// What a use was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UseKind {
    /// An HTTP `CONNECT` tunnel, from the request to the tunnel's end.
    Connect,
    /// An absolute-URI request, from the request to the end of its response body.
    Forward,
    /// A SOCKS5 `CONNECT`, from the request to the tunnel's end.
    Socks5,
}

/// One use of one proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Use {
    /// Simulator proxy ID.
    pub proxy: String,
    /// The proxy's listening port (what an extraction response names).
    pub port: u16,
    /// The client's source address.
    pub source: IpAddr,
    /// Tunnel or request.
    pub kind: UseKind,
    /// When the request arrived.
    pub started_ms: u64,
    /// When it ended (`None`: still going).
    pub ended_ms: Option<u64>,
    /// What it reached: a tunnel's target (`host:port`), a forwarded request's URI
    /// without its query; `None` before the request named one. Tells a checker's
    /// probe (its basic target, its echo) from gateway traffic on the same proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Bytes relayed through a tunnel, both ways, once it ended (`None`: a forwarded
    /// request, a tunnel still going or ended by an error). A checker's BASIC or
    /// TARGET probe closes its tunnel at once: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relayed: Option<u64>,
}

/// A proxy handed to an extraction client, by its listening port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handout {
    /// The proxy's port.
    pub port: u16,
    /// When the client had it (Unix ms).
    pub at_ms: u64,
}

/// A use of a proxy by someone else after it was handed to a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// The offending use.
    #[serde(flatten)]
    pub offending: Use,
    /// When the proxy was handed out.
    pub handed_out_ms: u64,
}

/// The auditor's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Uses looked at.
    pub uses: u64,
    /// Of them, by extraction clients.
    pub client_uses: u64,
    /// Proxies handed out (reported or first used by a client).
    pub handed_out: u64,
    /// Uses by others after a handout (0 when exclusivity held).
    pub violations: u64,
    /// The first of them.
    pub listed: Vec<Violation>,
    /// `false` when uses or handouts were dropped: the verdict may miss violations.
    pub complete: bool,
}

#[derive(Debug, Default)]
struct Inner {
    uses: Vec<Use>,
    dropped_uses: u64,
    handouts: Vec<Handout>,
    dropped_handouts: u64,
}

/// The use log of every proxy of one simulator.
#[derive(Debug, Default)]
pub struct AuditLog {
    inner: Mutex<Inner>,
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl AuditLog {
    /// Records the start of a use; it ends when the guard drops.
    pub fn begin(
        self: &Arc<Self>,
        proxy: &str,
        port: u16,
        peer: SocketAddr,
        kind: UseKind,
    ) -> UseGuard {
        let mut inner = self.inner.lock();
        if inner.uses.len() >= MAX_USES {
            inner.dropped_uses += 1;
            return UseGuard {
                log: None,
                index: 0,
            };
        }
        inner.uses.push(Use {
            proxy: proxy.to_owned(),
            port,
            source: peer.ip(),
            kind,
            started_ms: now_ms(),
            ended_ms: None,
            target: None,
            relayed: None,
        });
        UseGuard {
            log: Some(self.clone()),
            index: inner.uses.len() - 1,
        }
    }

    /// Records handouts.
    pub fn handouts(&self, handouts: &[Handout]) {
        let mut inner = self.inner.lock();
        for h in handouts {
            if inner.handouts.len() >= MAX_HANDOUTS {
                inner.dropped_handouts += 1;
                continue;
            }
            inner.handouts.push(*h);
        }
    }

    /// Every use so far, in start order.
    pub fn uses(&self) -> Vec<Use> {
        self.inner.lock().uses.clone()
    }

    /// The verdict with `clients` as the extraction clients' source addresses. A proxy
    /// is handed out at the earlier of its reported handout and its first client use;
    /// any other use of that proxy still going at that instant or started later is a
    /// violation. A reported handout of port `P` at `T` is of the proxy a client used
    /// next on `P` from `T` on; without such a use, of the proxy last used on `P` before
    /// `T`, else of the first one used on `P` after `T`.
    pub fn verdict(&self, clients: &[IpAddr]) -> Verdict {
        let inner = self.inner.lock();
        let is_client = |u: &Use| clients.contains(&u.source);
        // Uses by port, in start order.
        let mut by_port: HashMap<u16, Vec<&Use>> = HashMap::new();
        for u in &inner.uses {
            by_port.entry(u.port).or_default().push(u);
        }
        for uses in by_port.values_mut() {
            uses.sort_by_key(|u| u.started_ms);
        }
        let mut handed: BTreeMap<&str, u64> = BTreeMap::new();
        for h in &inner.handouts {
            let Some(on_port) = by_port.get(&h.port) else {
                continue;
            };
            let from = on_port.partition_point(|u| u.started_ms < h.at_ms);
            let proxy = on_port[from..]
                .iter()
                .find(|u| is_client(u))
                .or_else(|| from.checked_sub(1).map(|i| &on_port[i]))
                .or_else(|| on_port.get(from))
                .map(|u| u.proxy.as_str());
            if let Some(proxy) = proxy {
                let at = handed.entry(proxy).or_insert(h.at_ms);
                *at = (*at).min(h.at_ms);
            }
        }
        for u in inner.uses.iter().filter(|u| is_client(u)) {
            let at = handed.entry(u.proxy.as_str()).or_insert(u.started_ms);
            *at = (*at).min(u.started_ms);
        }
        let mut v = Verdict {
            uses: inner.uses.len() as u64,
            client_uses: inner.uses.iter().filter(|u| is_client(u)).count() as u64,
            handed_out: handed.len() as u64,
            complete: inner.dropped_uses == 0 && inner.dropped_handouts == 0,
            ..Verdict::default()
        };
        for u in inner.uses.iter().filter(|u| !is_client(u)) {
            let Some(&at) = handed.get(u.proxy.as_str()) else {
                continue;
            };
            let after = u.started_ms >= at || u.ended_ms.is_none_or(|end| end > at);
            if after {
                v.violations += 1;
                if v.listed.len() < MAX_LISTED {
                    v.listed.push(Violation {
                        offending: u.clone(),
                        handed_out_ms: at,
                    });
                }
            }
        }
        v
    }
}

/// Ends a use when dropped.
#[derive(Debug)]
pub struct UseGuard {
    log: Option<Arc<AuditLog>>,
    index: usize,
}

impl UseGuard {
    /// Records what the use reached (see [`Use::target`]).
    pub fn target(&self, target: impl Into<String>) {
        self.update(|u| u.target = Some(target.into()));
    }

    /// Records the bytes a tunnel relayed (see [`Use::relayed`]).
    pub fn relayed(&self, bytes: u64) {
        self.update(|u| u.relayed = Some(bytes));
    }

    fn update(&self, f: impl FnOnce(&mut Use)) {
        if let Some(log) = &self.log
            && let Some(u) = log.inner.lock().uses.get_mut(self.index)
        {
            f(u);
        }
    }
}

impl Drop for UseGuard {
    fn drop(&mut self) {
        if let Some(log) = self.log.take()
            && let Some(u) = log.inner.lock().uses.get_mut(self.index)
        {
            u.ended_ms = Some(now_ms());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 40_000)
    }

    /// Reports the handout of the proxy on `port`, now.
    fn hand_out(log: &AuditLog, port: u16) {
        log.handouts(&[Handout {
            port,
            at_ms: now_ms(),
        }]);
    }

    #[test]
    fn a_use_alive_at_the_handout_or_after_it_is_a_violation() {
        let log = Arc::new(AuditLog::default());
        let gw = peer("127.0.0.1");
        let client: IpAddr = "127.0.0.2".parse().unwrap();
        // Proxy 1: the gateway's use ended before the handout: fine.
        drop(log.begin("p1", 1, gw, UseKind::Connect));
        std::thread::sleep(std::time::Duration::from_millis(5));
        hand_out(&log, 1);
        drop(log.begin("p1", 1, SocketAddr::new(client, 1), UseKind::Connect));
        // Proxy 2: still in use by the gateway when handed out.
        let open = log.begin("p2", 2, gw, UseKind::Forward);
        hand_out(&log, 2);
        // Proxy 3: the client used it first, then the gateway did.
        drop(log.begin("p3", 3, SocketAddr::new(client, 2), UseKind::Socks5));
        std::thread::sleep(std::time::Duration::from_millis(2));
        drop(log.begin("p3", 3, gw, UseKind::Socks5));
        // Proxy 4: never handed out; gateway use is fine.
        drop(log.begin("p4", 4, gw, UseKind::Connect));
        let v = log.verdict(&[client]);
        assert_eq!((v.uses, v.client_uses, v.handed_out), (6, 2, 3));
        assert_eq!(v.violations, 2, "{v:?}");
        let ports: Vec<u16> = v.listed.iter().map(|x| x.offending.port).collect();
        assert_eq!(ports, [2, 3]);
        assert!(v.complete);
        drop(open);
        assert_eq!(
            log.verdict(&[client]).violations,
            2,
            "ending late does not clear it"
        );
    }

    #[test]
    fn a_use_records_its_target_and_the_bytes_it_relayed() {
        let log = Arc::new(AuditLog::default());
        let used = log.begin("p1", 1, peer("127.0.0.1"), UseKind::Connect);
        used.target("127.0.0.1:9000");
        used.relayed(0);
        drop(used);
        drop(log.begin("p1", 1, peer("127.0.0.1"), UseKind::Forward));
        let uses = log.uses();
        assert_eq!(
            (uses[0].target.as_deref(), uses[0].relayed),
            (Some("127.0.0.1:9000"), Some(0))
        );
        assert!(uses[0].ended_ms.is_some());
        assert_eq!((uses[1].target.as_deref(), uses[1].relayed), (None, None));
        let json = serde_json::to_string(&uses[1]).unwrap();
        assert!(
            !json.contains("target") && !json.contains("relayed"),
            "{json}"
        );
    }

    #[test]
    fn a_later_proxy_on_a_handed_out_port_is_judged_on_its_own() {
        let log = Arc::new(AuditLog::default());
        let gw = peer("127.0.0.1");
        let client: IpAddr = "127.0.0.2".parse().unwrap();
        // Each round: port 7 is handed out and the client uses the proxy it got, then
        // a gateway uses p9 on port 7. Round 1: the client got p1, which expired and p9
        // took its port: not a violation. Round 2: the client got p9: a violation.
        for (round, (got, expected)) in [("p1", (1, 0)), ("p9", (2, 1))].into_iter().enumerate() {
            std::thread::sleep(std::time::Duration::from_millis(2));
            hand_out(&log, 7);
            let from = SocketAddr::new(client, 1 + round as u16);
            drop(log.begin(got, 7, from, UseKind::Connect));
            std::thread::sleep(std::time::Duration::from_millis(2));
            drop(log.begin("p9", 7, gw, UseKind::Forward));
            let v = log.verdict(&[client]);
            assert_eq!((v.handed_out, v.violations), expected, "{got}: {v:?}");
        }
        let v = log.verdict(&[client]);
        assert_eq!(v.listed[0].offending.proxy, "p9");
    }
}
