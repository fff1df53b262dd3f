//! PostgreSQL stopped during extraction, usage analytics on: extraction keeps working
//! (0 errors) on both replicas, and once PostgreSQL is back the leader's flush commits
//! the usage recorded meanwhile (every replica's, kept in Redis).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proxy_pool_analytics::testkit::Postgres;
use proxy_pool_analytics::{Clock, Kind, PgStore, Settings, Subject, SystemClock, reason};

use crate::common::*;
use crate::*;

/// How long PostgreSQL stays down under load.
const OUTAGE: Duration = Duration::from_secs(10);
/// Bound on the leader's catch-up once PostgreSQL is back (flush every 1 s, a failed
/// connect waits at most its 2 s timeout).
const CATCH_UP: Duration = Duration::from_secs(20);

/// The committed extraction count of the drill's client (0 when none yet or PostgreSQL
/// does not answer).
fn committed(store: &PgStore) -> i64 {
    let subject = Subject {
        kind: Kind::Clients,
        name: "extractor".into(),
    };
    block(store.total(&subject))
        .ok()
        .flatten()
        .map_or(0, |t| t.requests)
}

/// Polls (bounded by `within`) until the committed count reaches `n`; how long it took.
fn until_committed(store: &PgStore, n: u64, within: Duration, stack: &Stack) -> Duration {
    let from = Instant::now();
    loop {
        let c = committed(store);
        if c >= i64::try_from(n).unwrap_or(i64::MAX) {
            return from.elapsed();
        }
        assert!(
            from.elapsed() < within,
            "committed {c} of {n} extractions within {within:?}\n{}",
            stack.procs.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn postgres_stopped_during_extraction() {
    let _one = one_stack();
    let mut pg = Postgres::start();
    let store = PgStore::new(pg.config());
    block(store.migrate()).expect("migrate the analytics schema");
    let dsn = std::env::temp_dir().join(format!("pp-drill-pg-dsn-{}", std::process::id()));
    std::fs::write(&dsn, format!("{}\n", pg.dsn())).expect("dsn file");
    let extra = format!(
        "{LEADERSHIP}\nanalytics: {{enabled: true, dsnFile: \"{}\", flushInterval: 1s, shutdownFlushTimeout: 2s}}\n",
        dsn.display()
    );
    let (mut stack, _leader) = ready_stack(start("drill-pg", 2, &extra));
    let load = baseline_load(&stack);
    let served = load.extracted.clone();
    let before = served.served.load(Ordering::Relaxed);
    until_committed(&store, before, CATCH_UP, &stack);

    pg.stop();
    let stopped = served.served.load(Ordering::Relaxed);
    std::thread::sleep(OUTAGE);
    let during = served.served.load(Ordering::Relaxed) - stopped;
    pg.restart();
    let back = served.served.load(Ordering::Relaxed);
    let caught_up = until_committed(&store, back, CATCH_UP, &stack);

    std::thread::sleep(Duration::from_secs(5));
    stack.procs.all_alive();
    let errors = served.errors.lock().unwrap().clone();
    finish(
        "postgres-stopped",
        &mut stack,
        load,
        &format!(
            "PostgreSQL down {} ms; extractions served while it was down {during}; \
             usage through the restart committed {} ms after it was back",
            OUTAGE.as_millis(),
            caught_up.as_millis()
        ),
    );
    let total = served.served.load(Ordering::Relaxed);
    let flushed = until_committed(&store, total, CATCH_UP, &stack);
    let committed_now = committed(&store);
    println!(
        "[postgres-stopped] committed extractions {committed_now} of {total} served ({} ms after the load stopped)",
        flushed.as_millis()
    );
    assert!(errors.is_empty(), "extraction failed: {errors:?}");
    assert!(
        during >= 5,
        "too few extractions during the outage: {during}"
    );
    assert_eq!(
        committed_now,
        i64::try_from(total).unwrap(),
        "every served extraction is committed once"
    );
    // The outage is on record: the day is flagged `sql_retry`.
    let days = Settings::for_zone("UTC").expect("UTC").days;
    let today = days.day_of(SystemClock.now());
    let coverage = block(store.coverage(today, today)).expect("coverage");
    assert!(
        coverage
            .iter()
            .any(|c| c.reasons.contains(&reason::SQL_RETRY.to_owned())),
        "{coverage:?}"
    );
    stack.tear_down();
    let _ = std::fs::remove_file(dsn);
}
