-- Transactional outbox. One row per message, written by Enqueue in the
-- caller's own transaction, so that a message exists exactly when the
-- caller's writes committed. id is the message's idempotency key, from an
-- identity that never hands out a number twice (a reaped id is never
-- reused).
--
-- state: 'ready' (waiting to be claimed once available_at has come),
-- 'leased' (a relay holds it until available_at, the lease's expiry;
-- fence names the tenure), 'delivered' (available_at: when), 'dead'
-- (retries exhausted or a permanent failure; available_at: when). A claim
-- takes rows that are ready or whose lease lapsed, and increments fence;
-- completion and failure are conditioned on (id, fence), so a holder
-- whose lease lapsed and was taken over can change nothing.
--
-- Shaped against bloat: every claim, heartbeat and completion rewrites the
-- row, so pages keep room for the new versions (fillfactor 70), and
-- autovacuum visits the table after 1% of it changed instead of the
-- default 20%, without the default cost delay. The indexes the relay reads
-- are partial: they hold the pending rows only (and the dead and delivered
-- rows that maintenance reads), so they stay as small as the backlog.
CREATE TABLE racefree_outbox (
  tenant       TEXT    NOT NULL,
  id           BIGINT  GENERATED ALWAYS AS IDENTITY,
  topic        TEXT    NOT NULL,
  key          TEXT    NOT NULL,
  ordered      BOOLEAN NOT NULL,
  payload      BYTEA   NOT NULL,
  headers      TEXT    NOT NULL,
  state        TEXT    NOT NULL CHECK (state IN ('ready', 'leased', 'delivered', 'dead')),
  created_at   BIGINT  NOT NULL,
  available_at BIGINT  NOT NULL,
  attempts     INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  fence        BIGINT  NOT NULL,
  leased_by    TEXT    NOT NULL,
  last_error   TEXT    NOT NULL,
  PRIMARY KEY (tenant, id)
) WITH (
  fillfactor = 70,
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_insert_scale_factor = 0.01,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_delay = 0
);
-- What a claim reads: the pending rows, by when they are due.
CREATE INDEX racefree_outbox_due ON racefree_outbox (tenant, available_at, id)
  WHERE state IN ('ready', 'leased');
-- Per-key ordering: the undelivered messages of a key, oldest first.
CREATE INDEX racefree_outbox_key ON racefree_outbox (tenant, topic, key, id)
  WHERE state IN ('ready', 'leased', 'dead') AND key <> '';
CREATE INDEX racefree_outbox_dead ON racefree_outbox (tenant, id) WHERE state = 'dead';
CREATE INDEX racefree_outbox_delivered ON racefree_outbox (tenant, available_at) WHERE state = 'delivered';

-- The failed attempts of each message, the latest few of them (the relay
-- deletes older ones in the transaction that adds one): one row per
-- tenure (fence) that ended in a failure or a lapsed lease.
CREATE TABLE racefree_outbox_attempts (
  tenant     TEXT    NOT NULL,
  message_id BIGINT  NOT NULL,
  fence      BIGINT  NOT NULL,
  attempt    INTEGER NOT NULL,
  worker     TEXT    NOT NULL,
  at         BIGINT  NOT NULL,
  outcome    TEXT    NOT NULL CHECK (outcome IN ('retry', 'dead', 'lapsed')),
  error      TEXT    NOT NULL,
  PRIMARY KEY (tenant, message_id, fence)
);

ALTER TABLE racefree_outbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_outbox FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_outbox
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_outbox_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_outbox_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_outbox_attempts
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));
