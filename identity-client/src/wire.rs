//! The JSON contract of the issuance endpoint, shared by the operator and its clients:
//! wire types, so they live in `proxy_pool_api::identity`; re-exported at this path.

pub use proxy_pool_api::identity::*;
