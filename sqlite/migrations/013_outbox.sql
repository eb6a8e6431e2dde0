-- Transactional outbox. One row per message, written by Enqueue in the
-- caller's own transaction, so that a message exists exactly when the
-- caller's writes committed. id is the message's idempotency key:
-- AUTOINCREMENT, because a plain INTEGER PRIMARY KEY hands the highest id
-- out again once its row is deleted, and a reaped id must never come back.
-- ids are global (SQLite has no other kind of rowid), every other key and
-- index leads with the tenant.
--
-- state: 'ready' (waiting to be claimed once available_at has come),
-- 'leased' (a relay holds it until available_at, the lease's expiry;
-- fence names the tenure), 'delivered' (available_at: when), 'dead'
-- (retries exhausted or a permanent failure; available_at: when). A claim
-- takes rows that are ready or whose lease lapsed, and increments fence;
-- completion and failure are conditioned on (id, fence), so a holder
-- whose lease lapsed and was taken over can change nothing.
CREATE TABLE racefree_outbox (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant       TEXT    NOT NULL,
  topic        TEXT    NOT NULL,
  key          TEXT    NOT NULL,
  ordered      INTEGER NOT NULL CHECK (ordered IN (0, 1)),
  payload      BLOB    NOT NULL,
  headers      TEXT    NOT NULL,
  state        TEXT    NOT NULL CHECK (state IN ('ready', 'leased', 'delivered', 'dead')),
  created_at   BIGINT  NOT NULL,
  available_at BIGINT  NOT NULL,
  attempts     INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  fence        BIGINT  NOT NULL,
  leased_by    TEXT    NOT NULL,
  last_error   TEXT    NOT NULL
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
) WITHOUT ROWID;
