-- Tenants, step 1 of 2 (expand only). Every racefree table gains a tenant
-- column and a unique index that leads with it; the old keys stay, so the
-- previous release's statements (whose ON CONFLICT targets name the old
-- keys, and whose INSERTs name no tenant) keep working unchanged against
-- this schema while a rollout is under way. Their rows land in the
-- default tenant, which is what they meant.
--
-- The column is NOT NULL DEFAULT 'default' rather than nullable: adding a
-- column with a constant default rewrites no row on PostgreSQL 11 and
-- later, and a NULL tenant would be a row that no policy can ever match.
--
-- Migration 012 drops the old keys and turns row-level security on; apply
-- it once no instance of the previous release runs (see README, "Tenants").
ALTER TABLE racefree_claims ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_claims_tenant_key ON racefree_claims (tenant, ns, key);
CREATE INDEX racefree_claims_tenant_expiry ON racefree_claims (tenant, ns, expires_at);

ALTER TABLE racefree_claim_floors ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_claim_floors_tenant_key ON racefree_claim_floors (tenant, ns);

ALTER TABLE racefree_dedup_events ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_dedup_events_tenant_key ON racefree_dedup_events (tenant, fingerprint);

ALTER TABLE racefree_idempotency ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_idempotency_tenant_key ON racefree_idempotency (tenant, scope, key);
CREATE INDEX racefree_idempotency_tenant_expires ON racefree_idempotency (tenant, expires_at);

ALTER TABLE racefree_idempotency_steps ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_idempotency_steps_tenant_key ON racefree_idempotency_steps (tenant, scope, key, step);
CREATE INDEX racefree_idempotency_steps_tenant_expires ON racefree_idempotency_steps (tenant, expires_at);

ALTER TABLE racefree_inbox_sources ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_inbox_sources_tenant_key ON racefree_inbox_sources (tenant, source);

ALTER TABLE racefree_inbox ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_inbox_tenant_id ON racefree_inbox (tenant, id);
CREATE UNIQUE INDEX racefree_inbox_tenant_event ON racefree_inbox (tenant, source, event_id);
CREATE UNIQUE INDEX racefree_inbox_tenant_seq ON racefree_inbox (tenant, source, seq);
CREATE INDEX racefree_inbox_tenant_expires_at ON racefree_inbox (tenant, expires_at);

ALTER TABLE racefree_sequences ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_sequences_tenant_key ON racefree_sequences (tenant, scope, name);

ALTER TABLE racefree_audit_heads ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_audit_heads_tenant_key ON racefree_audit_heads (tenant, scope);
ALTER TABLE racefree_audit ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_audit_tenant_key ON racefree_audit (tenant, scope, seq);
ALTER TABLE racefree_audit_checkpoints ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_audit_checkpoints_tenant_key ON racefree_audit_checkpoints (tenant, scope, n);

-- The chain trigger finds the head of the entry's own tenant and scope.
CREATE OR REPLACE FUNCTION racefree_audit_chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE racefree_audit_heads
     SET last_mac = NEW.mac,
         key_id = CASE WHEN NEW.action = 'racefree.audit.key_rotated' THEN NEW.subject ELSE key_id END
   WHERE tenant = NEW.tenant AND scope = NEW.scope AND last_seq = NEW.seq;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'racefree: audit entry % of scope % does not carry its head number', NEW.seq, NEW.scope
      USING ERRCODE = '23514';
  END IF;
  RETURN NULL;
END
$$;

ALTER TABLE racefree_quotas ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_quotas_tenant_key ON racefree_quotas (tenant, scope, key, kind);
CREATE INDEX racefree_quotas_tenant_expires_at ON racefree_quotas (tenant, scope, expires_at);
ALTER TABLE racefree_quota_ledger ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
CREATE UNIQUE INDEX racefree_quota_ledger_tenant_key ON racefree_quota_ledger (tenant, scope, ckey);
CREATE INDEX racefree_quota_ledger_tenant_expires_at ON racefree_quota_ledger (tenant, scope, expires_at);

-- The tenants racefree has seen, so that maintenance (the reapers) can
-- visit each tenant under its own setting: ids only, no data.
CREATE TABLE racefree_tenants (
  id         TEXT   NOT NULL PRIMARY KEY,
  created_at BIGINT NOT NULL
);
-- The default tenant, and the tenants the one-time tokens already use
-- (that package carried a tenant before this migration).
INSERT INTO racefree_tenants (id, created_at)
SELECT DISTINCT tenant, (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM (
  SELECT 'default' AS tenant
  UNION SELECT tenant FROM racefree_onetime_codes
  UNION SELECT tenant FROM racefree_refresh_families
) AS t;

-- API keys of the HTTP server. Only the SHA-256 of a key's secret is
-- stored; the key itself is printed once, when it is created.
CREATE TABLE racefree_keys (
  tenant     TEXT   NOT NULL,
  id         TEXT   NOT NULL,
  hash       BYTEA  NOT NULL,
  scopes     TEXT   NOT NULL,
  name       TEXT   NOT NULL,
  created_at BIGINT NOT NULL,
  revoked_at BIGINT,
  PRIMARY KEY (tenant, id)
);
