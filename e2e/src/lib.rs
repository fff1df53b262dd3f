//! Proxy Pool end-to-end harnesses.

mod ca;
pub mod cluster;
pub mod hostile;
pub mod http;
pub mod k8s;
pub mod loadgen;
pub mod logs;
pub mod ports;
pub mod procs;
pub mod sim;
pub mod stack;
