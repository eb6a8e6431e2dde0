-- Tamper-evident audit log. racefree_audit_heads holds each scope's chain
-- head: the last number handed out, the MAC of that entry and the key id of
-- the scope's current key epoch, plus the number and hash of the scope's
-- last checkpoint. Append increments last_seq with one upsert, which takes
-- the head row's lock until commit, so one lock orders both the numbering
-- and the chaining, and scopes never wait for each other. scope leads every
-- key so that it can become the tenant without a data migration.
CREATE TABLE racefree_audit_heads (
  scope    TEXT   PRIMARY KEY,
  last_seq BIGINT NOT NULL,
  last_mac BYTEA  NOT NULL,
  key_id   TEXT   NOT NULL,
  cp_n     BIGINT NOT NULL,
  cp_hash  BYTEA  NOT NULL
);
-- One row per entry: mac = HMAC-SHA256 over (version, scope, seq, prev_mac,
-- at, actor, action, subject, data) under the scope's key of epoch key_id.
-- The key itself is never stored here.
CREATE TABLE racefree_audit (
  scope    TEXT   NOT NULL,
  seq      BIGINT NOT NULL,
  at       BIGINT NOT NULL,
  actor    TEXT   NOT NULL,
  action   TEXT   NOT NULL,
  subject  TEXT   NOT NULL,
  data     BYTEA  NOT NULL,
  key_id   TEXT   NOT NULL,
  prev_mac BYTEA  NOT NULL,
  mac      BYTEA  NOT NULL,
  PRIMARY KEY (scope, seq)
);
-- Signed checkpoints of a scope's head, chained by prev (the SHA-256 of the
-- previous checkpoint of the scope).
CREATE TABLE racefree_audit_checkpoints (
  scope  TEXT   NOT NULL,
  n      BIGINT NOT NULL,
  seq    BIGINT NOT NULL,
  mac    BYTEA  NOT NULL,
  at     BIGINT NOT NULL,
  prev   BYTEA  NOT NULL,
  key_id TEXT   NOT NULL,
  sig    BYTEA  NOT NULL,
  PRIMARY KEY (scope, n)
);
-- Chaining: the head row follows every entry inserted, in the same
-- statement. An entry must carry its scope's current number (the one the
-- head's upsert handed out, under the head row's lock); the head then takes
-- its MAC, and after a key rotation entry (whose subject is the new key
-- id) the new key epoch.
CREATE FUNCTION racefree_audit_chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE racefree_audit_heads
     SET last_mac = NEW.mac,
         key_id = CASE WHEN NEW.action = 'racefree.audit.key_rotated' THEN NEW.subject ELSE key_id END
   WHERE scope = NEW.scope AND last_seq = NEW.seq;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'racefree: audit entry % of scope % does not carry its head number', NEW.seq, NEW.scope
      USING ERRCODE = '23514';
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER racefree_audit_chain AFTER INSERT ON racefree_audit
  FOR EACH ROW EXECUTE FUNCTION racefree_audit_chain();
-- Append-only for the application: UPDATE, DELETE and TRUNCATE are refused
-- (SQLSTATE 42501). The table owner can still disable the triggers; give
-- the application a role that does not own the tables (see the README).
CREATE FUNCTION racefree_audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'racefree: % is append-only: % refused', TG_TABLE_NAME, TG_OP
    USING ERRCODE = '42501';
END
$$;
CREATE TRIGGER racefree_audit_append_only BEFORE UPDATE OR DELETE ON racefree_audit
  FOR EACH ROW EXECUTE FUNCTION racefree_audit_refuse();
CREATE TRIGGER racefree_audit_no_truncate BEFORE TRUNCATE ON racefree_audit
  FOR EACH STATEMENT EXECUTE FUNCTION racefree_audit_refuse();
CREATE TRIGGER racefree_audit_checkpoints_append_only BEFORE UPDATE OR DELETE ON racefree_audit_checkpoints
  FOR EACH ROW EXECUTE FUNCTION racefree_audit_refuse();
CREATE TRIGGER racefree_audit_checkpoints_no_truncate BEFORE TRUNCATE ON racefree_audit_checkpoints
  FOR EACH STATEMENT EXECUTE FUNCTION racefree_audit_refuse();
