//! Proxy Pool operator: the custom resource types and (later) their reconcilers.

pub mod crd;
pub mod identity;
pub mod reconcile;
pub mod serve;
