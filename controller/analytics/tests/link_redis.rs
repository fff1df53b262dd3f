//! The working set's reconnecting Redis connection on a real `redis-server`: after
//! Redis restarts, calls fail for a moment (counted as Redis errors, never as corrupt
//! state) and then work again on a new connection, without restarting the worker.

mod support;

use std::sync::Arc;
use std::time::Duration;

use activity_pool::testkit::RedisServer;
use proxy_pool_analytics::{AnalyticsError, Connect, RedisConn, WorkingSet};

fn connect(url: String) -> Connect {
    Arc::new(move || {
        let url = url.clone();
        Box::pin(async move {
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await
        })
    })
}

#[tokio::test]
async fn relinks_after_a_redis_restart() {
    let mut redis = RedisServer::start();
    let ws = WorkingSet::new(RedisConn::relink(connect(redis.url())), "t", Vec::new());
    assert_eq!(ws.next_seq().await.unwrap(), 1);
    assert_eq!(ws.next_seq().await.unwrap(), 2);

    redis.stop();
    match ws.next_seq().await {
        Err(AnalyticsError::Redis(_)) => {}
        other => panic!("Redis down must be a transport error, got {other:?}"),
    }
    redis.restart();
    // Reconnects on a later call (a failed connect backs off for 500 ms).
    let mut seq = None;
    for _ in 0..50 {
        match ws.next_seq().await {
            Ok(n) => {
                seq = Some(n);
                break;
            }
            Err(AnalyticsError::Redis(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(seq.is_some(), "the working set reconnected");
}

#[tokio::test]
async fn a_fixed_connection_is_used_as_given() {
    let redis = RedisServer::start();
    let conn = support::redis_conn(&redis).await;
    let ws = WorkingSet::new(conn, "t", Vec::new());
    assert_eq!(ws.next_seq().await.unwrap(), 1);
}
