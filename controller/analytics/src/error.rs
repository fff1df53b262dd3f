//! The analytics error type.

/// Everything that can go wrong in analytics. None of it reaches the request paths.
#[derive(Debug, thiserror::Error)]
pub enum AnalyticsError {
    /// Redis failed (retryable).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// PostgreSQL failed (retryable).
    #[error("postgres: {0}")]
    Sql(#[from] tokio_postgres::Error),
    /// A dependency is not reachable.
    #[error("{0} unavailable")]
    Unavailable(&'static str),
    /// The schema is not migrated: run the `migrate` command.
    #[error("analytics schema missing or at another version; run the migrate command")]
    SchemaMissing,
    /// The history was recorded in another time zone.
    #[error("analytics history uses time zone {stored}, config says {configured}")]
    TimeZoneMismatch {
        /// In SQL.
        stored: String,
        /// In the config.
        configured: String,
    },
    /// Stored data is not what this code wrote.
    #[error("corrupt analytics data: {0}")]
    Corrupt(String),
}
