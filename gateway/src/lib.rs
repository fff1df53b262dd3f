//! Proxy Pool gateway: the forward-proxy data plane.
//!
//! HTTP (CONNECT and absolute-URI) and SOCKS5 listeners route each request by the
//! client's username parameters to the first matching routing of the current
//! [`snapshot`], pick an upstream vendor proxy with exact per-proxy capacity
//! ([`capacity`], [`select`], [`session`]), and tunnel or forward through it
//! ([`upstream`]). The hot path reads one atomically swapped snapshot and local
//! atomics only: no Redis, no database, no locks across I/O.
//!
//! Entry point: [`serve`] (or [`Gateway`]) with caller-bound listeners, a
//! [`SnapshotHandle`], a [`GatewayConfig`] and a shutdown future.

pub mod admin;
pub mod capacity;
pub mod clients;
pub mod clock;
pub mod config;
pub mod controlplane;
pub mod error;
pub mod io;
pub mod limit_args;
pub mod limits;
pub mod listener;
pub mod metrics;
pub mod outcome;
pub mod parse;
pub mod proxy_id;
pub mod route;
pub mod select;
pub mod session;
pub mod snapshot;
pub mod upstream;
pub mod usage;

pub use config::{AuthMode, GatewayConfig, UpstreamConfig};
pub use error::{ErrorSource, GatewayError};
pub use listener::{Gateway, Listeners, ServeReport, WorkerListeners, bind_reuseport, serve};
pub use snapshot::{SnapshotHandle, SnapshotInput, SnapshotSource};
