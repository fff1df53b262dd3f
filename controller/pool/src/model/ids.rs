//! The identifier newtypes: the contract's ([`proxy_pool_api::ids`]), re-exported
//! where the pool's callers have always found them.

pub use proxy_pool_api::ids::{
    ClientId, IdError, IdempotencyKey, InstanceId, Label, OperationId, ProxyId, RequestDigest,
    RequestId, SessionId, UpstreamId, WorkerId,
};
