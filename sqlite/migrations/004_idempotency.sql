-- Idempotency keys. The in-progress lease is a claim (namespace
-- 'idempotency'); this table holds what outlives it: the request's
-- fingerprint and, once completed, the stored response. Rows expire after
-- the retention period and are reaped in batches.
CREATE TABLE racefree_idempotency (
  scope        TEXT   NOT NULL,
  key          TEXT   NOT NULL,
  fingerprint  TEXT   NOT NULL,
  status       TEXT   NOT NULL,
  response     BLOB,
  created_at   BIGINT NOT NULL,
  completed_at BIGINT,
  expires_at   BIGINT NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX racefree_idempotency_expires ON racefree_idempotency (expires_at);

-- Recovery points of multi-step requests: the result of each completed
-- step (typically the ID of an external side effect), so that a retry
-- resumes after it instead of repeating it.
CREATE TABLE racefree_idempotency_steps (
  scope      TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  step       TEXT   NOT NULL,
  value      TEXT   NOT NULL,
  fence      BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (scope, key, step)
);
CREATE INDEX racefree_idempotency_steps_expires ON racefree_idempotency_steps (expires_at);
