//! `proxy-pool-checker`: probes vendor proxies *through* the proxy — BASIC (connect +
//! HTTP `CONNECT` / SOCKS5 handshake with the vendor credentials), EGRESS (which
//! address a target sees, and whether ours leaks), TARGET (a routing's target is
//! reachable) — and returns observations. It never decides health: the controller's
//! reducer does.
//!
//! Structure: [`ports`] (task source, observation sink, prober), [`NetProber`] (real
//! sockets), [`runner::run`] (bounded concurrency, deadlines, graceful shutdown),
//! [`memory`] (in-process bindings), [`ops`] and [`metrics`] (the ops listener and what
//! it exports). It never logs a credential and nothing is logged above DEBUG per
//! probe.

pub mod cli;
pub mod echo;
pub mod grpc;
pub mod handshake;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod ports;
pub mod prober;
pub mod runner;
pub mod smoke;

pub use grpc::{GrpcBinding, GrpcOptions};
pub use memory::{MemorySink, MemorySource};
pub use model::{Check, Credentials, Dial, FailureCode, Observation, ProbeTask, Protocol, Tier};
pub use ports::{BindingError, ObservationSink, Prober, TaskSource};
pub use prober::{NetProber, ProberOptions};
pub use runner::{RunStats, RunnerOptions, run, run_counting};
