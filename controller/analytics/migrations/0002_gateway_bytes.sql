-- Proxy Pool usage analytics, schema version 2: gateway bytes per subject (a Routing's
-- every client, a DistributionClient's over every Routing), up = from the client, down =
-- to it. Applied only by the explicit `migrate` entry point, after 0001. Idempotent; rows
-- written by version 1 read zero bytes.
ALTER TABLE pp_analytics_total
    ADD COLUMN IF NOT EXISTS bytes_up   bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS bytes_down bigint NOT NULL DEFAULT 0;
ALTER TABLE pp_analytics_daily
    ADD COLUMN IF NOT EXISTS bytes_up   bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS bytes_down bigint NOT NULL DEFAULT 0;
INSERT INTO pp_analytics_schema (version) VALUES (2) ON CONFLICT (version) DO NOTHING;
