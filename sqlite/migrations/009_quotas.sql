-- Quotas and rate limits: one row per (scope, key, kind) counter. scope
-- leads every key and index, so that it can become the tenant without a
-- data migration. For GCRA (kind 'gcra'), tat is the theoretical arrival
-- time in Unix ms; for a fixed window (kind 'window'), tat is the start of
-- the window that used counts. updated_at is the clock of the last charge.
-- expires_at is the instant from which the row means the same as no row
-- (a full bucket, an elapsed window), so the reaper may delete it then.
CREATE TABLE racefree_quotas (
  scope      TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  kind       TEXT   NOT NULL CHECK (kind IN ('gcra', 'window')),
  tat        BIGINT NOT NULL,
  used       BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (scope, key, kind)
);
CREATE INDEX racefree_quotas_expires_at ON racefree_quotas (scope, expires_at);
-- Consumption keys: one row per (scope, consumption key) charged, written in
-- the transaction that charges, so that a replayed request charges once and
-- gets the first charge's figures back. Kept until expires_at.
CREATE TABLE racefree_quota_ledger (
  scope      TEXT   NOT NULL,
  ckey       TEXT   NOT NULL,
  remaining  BIGINT NOT NULL,
  reset_at   BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (scope, ckey)
);
CREATE INDEX racefree_quota_ledger_expires_at ON racefree_quota_ledger (scope, expires_at);
