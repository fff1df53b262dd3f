//! Contracts shared by every Proxy Pool binary.
//!
//! Owns the wire and config types; never does I/O.

pub mod client_limits;
pub mod config;
pub mod controlplane;
pub mod echo;
pub mod egress;
pub mod gateway_clients;
pub mod identity;
pub mod ids;
pub mod inventory;
pub mod proxy;
pub mod secret;
pub mod socks5;
pub mod throttle;
pub mod token;
