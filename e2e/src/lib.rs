//! Proxy Pool end-to-end harnesses.

pub mod sim;
