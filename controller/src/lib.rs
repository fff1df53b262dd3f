//! `proxy-pool-controller` as a library: the parts the composition root (`main.rs`)
//! starts. Each module owns one concern and takes its dependencies as ports.

pub mod health;
pub mod provider;
