//! What every control-plane RPC does around its handler, in one place for the worker
//! and the checker services: hold the request to its RPC's size, map the handler's
//! error to a gRPC `Status`, and count a server stream against the stream limit.

use std::future::Future;

use proxy_pool_api::controlplane::limits as sizes;
use tokio::sync::OwnedSemaphorePermit;
use tonic::{Request, Response, Status};

use super::Shared;
use super::error::{ControlPlaneError, CpResult};

/// Answers `request` with `handler` once it is within `limit` bytes (the service's
/// decode limit is the largest RPC's, so each RPC checks its own).
pub(crate) async fn serve<M, R, F>(
    request: Request<M>,
    rpc: &'static str,
    limit: usize,
    handler: impl FnOnce(Request<M>) -> F,
) -> Result<Response<R>, Status>
where
    M: prost::Message,
    F: Future<Output = CpResult<R>>,
{
    sizes::check(rpc, request.get_ref(), limit)
        .map_err(|e| Status::from(ControlPlaneError::TooLarge(e.rpc)))?;
    Ok(Response::new(handler(request).await?))
}

impl Shared {
    /// A place for one more open server stream, or `Exhausted` at the configured limit.
    pub(crate) fn open_stream(&self) -> CpResult<OwnedSemaphorePermit> {
        self.streams
            .clone()
            .try_acquire_owned()
            .map_err(|_| ControlPlaneError::Exhausted("too many open streams"))
    }
}
