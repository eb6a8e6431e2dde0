-- Tenants, step 2 of 2 (contract). SQLite cannot change a table's key in
-- place, so each table is rebuilt with keys that lead with the tenant and
-- a tenant column without a default (a statement that forgets the tenant
-- fails instead of landing in the default tenant). The previous release's
-- statements stop working here: apply it once every process runs this
-- release (README, "Tenants"). The audit tables' append-only triggers are
-- dropped for the copy and created again on the new tables.
DROP TRIGGER racefree_audit_chain;
DROP TRIGGER racefree_audit_no_update;
DROP TRIGGER racefree_audit_no_delete;
DROP TRIGGER racefree_audit_checkpoints_no_update;
DROP TRIGGER racefree_audit_checkpoints_no_delete;

CREATE TABLE racefree_claims_new (
  tenant     TEXT   NOT NULL,
  ns         TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  holder     TEXT   NOT NULL,
  count      BIGINT NOT NULL,
  first_seen BIGINT NOT NULL,
  last_seen  BIGINT NOT NULL,
  fence      BIGINT,
  claimed_at BIGINT,
  expires_at BIGINT,
  PRIMARY KEY (tenant, ns, key)
);
INSERT INTO racefree_claims_new (tenant, ns, key, holder, count, first_seen, last_seen, fence, claimed_at, expires_at) SELECT tenant, ns, key, holder, count, first_seen, last_seen, fence, claimed_at, expires_at FROM racefree_claims;
DROP TABLE racefree_claims;
ALTER TABLE racefree_claims_new RENAME TO racefree_claims;
CREATE INDEX racefree_claims_expiry ON racefree_claims (tenant, ns, expires_at);

CREATE TABLE racefree_claim_floors_new (
  tenant TEXT   NOT NULL,
  ns     TEXT   NOT NULL,
  floor  BIGINT NOT NULL,
  PRIMARY KEY (tenant, ns)
);
INSERT INTO racefree_claim_floors_new (tenant, ns, floor) SELECT tenant, ns, floor FROM racefree_claim_floors;
DROP TABLE racefree_claim_floors;
ALTER TABLE racefree_claim_floors_new RENAME TO racefree_claim_floors;

CREATE TABLE racefree_dedup_events_new (
  tenant         TEXT   NOT NULL,
  fingerprint    TEXT   NOT NULL,
  source         TEXT   NOT NULL,
  level          TEXT   NOT NULL,
  message        TEXT   NOT NULL,
  classification TEXT,
  external_id    TEXT,
  result_fence   BIGINT,
  result_at      BIGINT,
  PRIMARY KEY (tenant, fingerprint)
);
INSERT INTO racefree_dedup_events_new (tenant, fingerprint, source, level, message, classification, external_id, result_fence, result_at) SELECT tenant, fingerprint, source, level, message, classification, external_id, result_fence, result_at FROM racefree_dedup_events;
DROP TABLE racefree_dedup_events;
ALTER TABLE racefree_dedup_events_new RENAME TO racefree_dedup_events;

CREATE TABLE racefree_idempotency_new (
  tenant       TEXT   NOT NULL,
  scope        TEXT   NOT NULL,
  key          TEXT   NOT NULL,
  fingerprint  TEXT   NOT NULL,
  status       TEXT   NOT NULL,
  response     BLOB,
  created_at   BIGINT NOT NULL,
  completed_at BIGINT,
  expires_at   BIGINT NOT NULL,
  PRIMARY KEY (tenant, scope, key)
);
INSERT INTO racefree_idempotency_new (tenant, scope, key, fingerprint, status, response, created_at, completed_at, expires_at) SELECT tenant, scope, key, fingerprint, status, response, created_at, completed_at, expires_at FROM racefree_idempotency;
DROP TABLE racefree_idempotency;
ALTER TABLE racefree_idempotency_new RENAME TO racefree_idempotency;
CREATE INDEX racefree_idempotency_expires ON racefree_idempotency (tenant, expires_at);

CREATE TABLE racefree_idempotency_steps_new (
  tenant     TEXT   NOT NULL,
  scope      TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  step       TEXT   NOT NULL,
  value      TEXT   NOT NULL,
  fence      BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (tenant, scope, key, step)
);
INSERT INTO racefree_idempotency_steps_new (tenant, scope, key, step, value, fence, expires_at) SELECT tenant, scope, key, step, value, fence, expires_at FROM racefree_idempotency_steps;
DROP TABLE racefree_idempotency_steps;
ALTER TABLE racefree_idempotency_steps_new RENAME TO racefree_idempotency_steps;
CREATE INDEX racefree_idempotency_steps_expires ON racefree_idempotency_steps (tenant, expires_at);

CREATE TABLE racefree_inbox_sources_new (
  tenant   TEXT   NOT NULL,
  source   TEXT   NOT NULL,
  last_seq BIGINT NOT NULL,
  PRIMARY KEY (tenant, source)
);
INSERT INTO racefree_inbox_sources_new (tenant, source, last_seq) SELECT tenant, source, last_seq FROM racefree_inbox_sources;
DROP TABLE racefree_inbox_sources;
ALTER TABLE racefree_inbox_sources_new RENAME TO racefree_inbox_sources;

CREATE TABLE racefree_inbox_new (
  id          INTEGER PRIMARY KEY,
  tenant      TEXT   NOT NULL,
  source      TEXT   NOT NULL,
  event_id    TEXT   NOT NULL,
  seq         BIGINT,
  status      TEXT   NOT NULL CHECK (status IN ('processed', 'failed')),
  reason      TEXT,
  payload     BLOB,
  received_at BIGINT NOT NULL,
  expires_at  BIGINT NOT NULL,
  UNIQUE (tenant, source, event_id)
);
INSERT INTO racefree_inbox_new (id, tenant, source, event_id, seq, status, reason, payload, received_at, expires_at) SELECT id, tenant, source, event_id, seq, status, reason, payload, received_at, expires_at FROM racefree_inbox;
DROP TABLE racefree_inbox;
ALTER TABLE racefree_inbox_new RENAME TO racefree_inbox;
CREATE UNIQUE INDEX racefree_inbox_source_seq ON racefree_inbox (tenant, source, seq);
CREATE INDEX racefree_inbox_expires_at ON racefree_inbox (tenant, expires_at);

CREATE TABLE racefree_sequences_new (
  tenant TEXT   NOT NULL,
  scope  TEXT   NOT NULL,
  name   TEXT   NOT NULL,
  last   BIGINT NOT NULL,
  PRIMARY KEY (tenant, scope, name)
);
INSERT INTO racefree_sequences_new (tenant, scope, name, last) SELECT tenant, scope, name, last FROM racefree_sequences;
DROP TABLE racefree_sequences;
ALTER TABLE racefree_sequences_new RENAME TO racefree_sequences;

CREATE TABLE racefree_audit_heads_new (
  tenant   TEXT   NOT NULL,
  scope    TEXT   NOT NULL,
  last_seq BIGINT NOT NULL,
  last_mac BLOB   NOT NULL,
  key_id   TEXT   NOT NULL,
  cp_n     BIGINT NOT NULL,
  cp_hash  BLOB   NOT NULL,
  PRIMARY KEY (tenant, scope)
);
INSERT INTO racefree_audit_heads_new (tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash) SELECT tenant, scope, last_seq, last_mac, key_id, cp_n, cp_hash FROM racefree_audit_heads;
DROP TABLE racefree_audit_heads;
ALTER TABLE racefree_audit_heads_new RENAME TO racefree_audit_heads;

CREATE TABLE racefree_audit_new (
  tenant   TEXT   NOT NULL,
  scope    TEXT   NOT NULL,
  seq      BIGINT NOT NULL,
  at       BIGINT NOT NULL,
  actor    TEXT   NOT NULL,
  action   TEXT   NOT NULL,
  subject  TEXT   NOT NULL,
  data     BLOB   NOT NULL,
  key_id   TEXT   NOT NULL,
  prev_mac BLOB   NOT NULL,
  mac      BLOB   NOT NULL,
  PRIMARY KEY (tenant, scope, seq)
) WITHOUT ROWID;
INSERT INTO racefree_audit_new (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac) SELECT tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac FROM racefree_audit;
DROP TABLE racefree_audit;
ALTER TABLE racefree_audit_new RENAME TO racefree_audit;

CREATE TABLE racefree_audit_checkpoints_new (
  tenant TEXT   NOT NULL,
  scope  TEXT   NOT NULL,
  n      BIGINT NOT NULL,
  seq    BIGINT NOT NULL,
  mac    BLOB   NOT NULL,
  at     BIGINT NOT NULL,
  prev   BLOB   NOT NULL,
  key_id TEXT   NOT NULL,
  sig    BLOB   NOT NULL,
  PRIMARY KEY (tenant, scope, n)
);
INSERT INTO racefree_audit_checkpoints_new (tenant, scope, n, seq, mac, at, prev, key_id, sig) SELECT tenant, scope, n, seq, mac, at, prev, key_id, sig FROM racefree_audit_checkpoints;
DROP TABLE racefree_audit_checkpoints;
ALTER TABLE racefree_audit_checkpoints_new RENAME TO racefree_audit_checkpoints;

CREATE TABLE racefree_quotas_new (
  tenant     TEXT   NOT NULL,
  scope      TEXT   NOT NULL,
  key        TEXT   NOT NULL,
  kind       TEXT   NOT NULL CHECK (kind IN ('gcra', 'window')),
  tat        BIGINT NOT NULL,
  used       BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (tenant, scope, key, kind)
);
INSERT INTO racefree_quotas_new (tenant, scope, key, kind, tat, used, updated_at, expires_at) SELECT tenant, scope, key, kind, tat, used, updated_at, expires_at FROM racefree_quotas;
DROP TABLE racefree_quotas;
ALTER TABLE racefree_quotas_new RENAME TO racefree_quotas;
CREATE INDEX racefree_quotas_expires_at ON racefree_quotas (tenant, scope, expires_at);

CREATE TABLE racefree_quota_ledger_new (
  tenant     TEXT   NOT NULL,
  scope      TEXT   NOT NULL,
  ckey       TEXT   NOT NULL,
  remaining  BIGINT NOT NULL,
  reset_at   BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (tenant, scope, ckey)
);
INSERT INTO racefree_quota_ledger_new (tenant, scope, ckey, remaining, reset_at, expires_at) SELECT tenant, scope, ckey, remaining, reset_at, expires_at FROM racefree_quota_ledger;
DROP TABLE racefree_quota_ledger;
ALTER TABLE racefree_quota_ledger_new RENAME TO racefree_quota_ledger;
CREATE INDEX racefree_quota_ledger_expires_at ON racefree_quota_ledger (tenant, scope, expires_at);

CREATE TRIGGER racefree_audit_chain AFTER INSERT ON racefree_audit
BEGIN
  SELECT RAISE(ABORT, 'racefree: an audit entry does not carry its head number')
  WHERE NOT EXISTS (SELECT 1 FROM racefree_audit_heads WHERE tenant = NEW.tenant AND scope = NEW.scope AND last_seq = NEW.seq);
  UPDATE racefree_audit_heads
     SET last_mac = NEW.mac,
         key_id = CASE WHEN NEW.action = 'racefree.audit.key_rotated' THEN NEW.subject ELSE key_id END
   WHERE tenant = NEW.tenant AND scope = NEW.scope AND last_seq = NEW.seq;
END;
CREATE TRIGGER racefree_audit_no_update BEFORE UPDATE ON racefree_audit
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit is append-only: UPDATE refused'); END;
CREATE TRIGGER racefree_audit_no_delete BEFORE DELETE ON racefree_audit
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit is append-only: DELETE refused'); END;
CREATE TRIGGER racefree_audit_checkpoints_no_update BEFORE UPDATE ON racefree_audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit_checkpoints is append-only: UPDATE refused'); END;
CREATE TRIGGER racefree_audit_checkpoints_no_delete BEFORE DELETE ON racefree_audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit_checkpoints is append-only: DELETE refused'); END;
