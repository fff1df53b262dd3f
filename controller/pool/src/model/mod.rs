//! Domain values of the activity pool: identifiers, records, requests and results.
//!
//! The identifier types are the contract's ([`proxy_pool_api::ids`]), re-exported here.
//! One module per concern: [`ids`], records ([`record`]), health ([`health`]),
//! extraction ([`extract`]) and worker ownership and sessions ([`worker`]); every
//! value is re-exported at `activity_pool::model::*`.

pub mod extract;
pub mod health;
pub mod ids;
pub mod record;
pub mod worker;

pub use extract::*;
pub use health::*;
pub use ids::*;
pub use record::*;
pub use worker::*;
