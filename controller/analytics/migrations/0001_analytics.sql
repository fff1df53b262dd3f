-- Proxy Pool usage analytics, schema version 1. Applied only by the explicit
-- `migrate` entry point, never at start-up. Idempotent (IF NOT EXISTS); it does not
-- repair a table that exists with another shape.
CREATE TABLE IF NOT EXISTS pp_analytics_schema (
    version    integer     PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- One row: the last committed snapshot sequence and the history's time zone.
CREATE TABLE IF NOT EXISTS pp_analytics_meta (
    id             smallint PRIMARY KEY CHECK (id = 1),
    last_seq       bigint   NOT NULL,
    last_flush_ms  bigint   NOT NULL,
    first_flush_ms bigint   NOT NULL,
    time_zone      text     NOT NULL,
    format         smallint NOT NULL
);
-- Cumulative totals per subject: kept forever, never reset.
CREATE TABLE IF NOT EXISTS pp_analytics_total (
    kind      text   NOT NULL,
    name      text   NOT NULL,
    requests  bigint NOT NULL,
    proxies   bigint NOT NULL,
    uv        bigint NOT NULL,
    hll       bytea  NOT NULL,
    seq       bigint NOT NULL,
    first_day date   NOT NULL,
    PRIMARY KEY (kind, name)
);
-- Daily rows per subject: absolute values of the day and its raw HyperLogLog.
CREATE TABLE IF NOT EXISTS pp_analytics_daily (
    kind     text    NOT NULL,
    name     text    NOT NULL,
    day      date    NOT NULL,
    requests bigint  NOT NULL,
    proxies  bigint  NOT NULL,
    uv       bigint  NOT NULL,
    hll      bytea   NOT NULL,
    seq      bigint  NOT NULL,
    degraded boolean NOT NULL DEFAULT false,
    PRIMARY KEY (kind, name, day)
);
CREATE INDEX IF NOT EXISTS pp_analytics_daily_day ON pp_analytics_daily (day, kind, name);
-- Coverage: a day the collector ran on (a missing subject row on a covered day is a
-- real zero; an uncovered day is unknown), with its quality.
CREATE TABLE IF NOT EXISTS pp_analytics_days (
    day      date    PRIMARY KEY,
    degraded boolean NOT NULL,
    reasons  text[]  NOT NULL,
    seq      bigint  NOT NULL
);
INSERT INTO pp_analytics_schema (version) VALUES (1) ON CONFLICT (version) DO NOTHING;
