//! The vendor-source port and its static implementation.

use async_trait::async_trait;

use super::error::FetchError;
use super::model::{ParseDrop, VendorBatch, VendorProxy};
use super::options::FetchBudget;

/// Where an upstream's proxies come from. One call is one fetch; it never writes to
/// the pool and never logs secrets.
#[async_trait]
pub trait VendorSource: Send + Sync + std::fmt::Debug {
    /// Fetches the current offer within `budget`.
    async fn fetch(&self, budget: &FetchBudget) -> Result<VendorBatch, FetchError>;
}

/// A fixed list of proxies (the `static` source). Every fetch offers the whole list,
/// so the reconciler keeps refreshing their TTL.
#[derive(Clone, Debug, Default)]
pub struct StaticSource {
    proxies: Vec<VendorProxy>,
}

impl StaticSource {
    /// A source offering `proxies`.
    pub fn new(proxies: Vec<VendorProxy>) -> Self {
        Self { proxies }
    }
}

#[async_trait]
impl VendorSource for StaticSource {
    async fn fetch(&self, budget: &FetchBudget) -> Result<VendorBatch, FetchError> {
        let mut batch = VendorBatch::default();
        for (i, p) in self.proxies.iter().enumerate() {
            if i < budget.max_candidates {
                batch.proxies.push(p.clone());
            } else {
                batch.drop_entry(ParseDrop::OverBudget);
            }
        }
        Ok(batch)
    }
}
