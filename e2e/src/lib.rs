//! Proxy Pool end-to-end harnesses.
