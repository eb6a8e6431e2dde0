-- Tamper-evident audit log. racefree_audit_heads holds each scope's chain
-- head: the last number handed out, the MAC of that entry and the key id of
-- the scope's current key epoch, plus the number and hash of the scope's
-- last checkpoint. Append increments last_seq with one upsert inside an
-- IMMEDIATE transaction, so one write lock orders both the numbering and
-- the chaining. scope leads every key so that it can become the tenant
-- without a data migration.
CREATE TABLE racefree_audit_heads (
  scope    TEXT   PRIMARY KEY,
  last_seq BIGINT NOT NULL,
  last_mac BLOB   NOT NULL,
  key_id   TEXT   NOT NULL,
  cp_n     BIGINT NOT NULL,
  cp_hash  BLOB   NOT NULL
);
-- One row per entry: mac = HMAC-SHA256 over (version, scope, seq, prev_mac,
-- at, actor, action, subject, data) under the scope's key of epoch key_id.
-- The key itself is never stored here. WITHOUT ROWID stores the entries in
-- (scope, seq) order, so that Verify reads one b-tree instead of an index
-- and then the table.
CREATE TABLE racefree_audit (
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
  PRIMARY KEY (scope, seq)
) WITHOUT ROWID;
-- Signed checkpoints of a scope's head, chained by prev (the SHA-256 of the
-- previous checkpoint of the scope).
CREATE TABLE racefree_audit_checkpoints (
  scope  TEXT   NOT NULL,
  n      BIGINT NOT NULL,
  seq    BIGINT NOT NULL,
  mac    BLOB   NOT NULL,
  at     BIGINT NOT NULL,
  prev   BLOB   NOT NULL,
  key_id TEXT   NOT NULL,
  sig    BLOB   NOT NULL,
  PRIMARY KEY (scope, n)
);
-- Chaining: the head row follows every entry inserted, in the same
-- statement. An entry must carry its scope's current number (the one the
-- head's upsert handed out, under the write lock); the head then takes its
-- MAC, and after a key rotation entry (whose subject is the new key id)
-- the new key epoch.
CREATE TRIGGER racefree_audit_chain AFTER INSERT ON racefree_audit
BEGIN
  SELECT RAISE(ABORT, 'racefree: an audit entry does not carry its head number')
  WHERE NOT EXISTS (SELECT 1 FROM racefree_audit_heads WHERE scope = NEW.scope AND last_seq = NEW.seq);
  UPDATE racefree_audit_heads
     SET last_mac = NEW.mac,
         key_id = CASE WHEN NEW.action = 'racefree.audit.key_rotated' THEN NEW.subject ELSE key_id END
   WHERE scope = NEW.scope AND last_seq = NEW.seq;
END;
-- Append-only for the application: UPDATE and DELETE are refused. SQLite
-- has no TRUNCATE (DELETE without WHERE fires the trigger too) and no
-- roles: whoever can write the file can drop the triggers, which is what
-- checkpoints kept elsewhere are for.
CREATE TRIGGER racefree_audit_no_update BEFORE UPDATE ON racefree_audit
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit is append-only: UPDATE refused'); END;
CREATE TRIGGER racefree_audit_no_delete BEFORE DELETE ON racefree_audit
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit is append-only: DELETE refused'); END;
CREATE TRIGGER racefree_audit_checkpoints_no_update BEFORE UPDATE ON racefree_audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit_checkpoints is append-only: UPDATE refused'); END;
CREATE TRIGGER racefree_audit_checkpoints_no_delete BEFORE DELETE ON racefree_audit_checkpoints
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit_checkpoints is append-only: DELETE refused'); END;
