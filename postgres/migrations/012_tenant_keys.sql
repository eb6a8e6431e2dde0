-- Tenants, step 2 of 2 (contract). Every key of every racefree table now
-- leads with the tenant, so no constraint can reveal another tenant's row,
-- and row-level security is ENABLED and FORCED (the table owner obeys it
-- too) with one policy per table:
--
--   tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), ''))
--
-- missing_ok (true) makes an unset setting NULL instead of an error, NULLIF
-- makes an empty one NULL too, and a NULL tenant matches no row: a
-- transaction that set no tenant sees nothing and writes nothing. The
-- sub-select is evaluated once per statement, not once per row. racefree
-- sets the setting with set_config(…, true), scoped to the transaction.
--
-- The previous release's statements stop working here (their ON CONFLICT
-- targets are gone, and they set no tenant): apply this migration once
-- every instance runs this release (README, "Tenants").

ALTER TABLE racefree_claims DROP CONSTRAINT racefree_claims_pkey;
ALTER TABLE racefree_claims ADD CONSTRAINT racefree_claims_pkey PRIMARY KEY USING INDEX racefree_claims_tenant_key;
DROP INDEX racefree_claims_expiry;

ALTER TABLE racefree_claim_floors DROP CONSTRAINT racefree_claim_floors_pkey;
ALTER TABLE racefree_claim_floors ADD CONSTRAINT racefree_claim_floors_pkey PRIMARY KEY USING INDEX racefree_claim_floors_tenant_key;

ALTER TABLE racefree_dedup_events DROP CONSTRAINT racefree_dedup_events_pkey;
ALTER TABLE racefree_dedup_events ADD CONSTRAINT racefree_dedup_events_pkey PRIMARY KEY USING INDEX racefree_dedup_events_tenant_key;

ALTER TABLE racefree_idempotency DROP CONSTRAINT racefree_idempotency_pkey;
ALTER TABLE racefree_idempotency ADD CONSTRAINT racefree_idempotency_pkey PRIMARY KEY USING INDEX racefree_idempotency_tenant_key;
DROP INDEX racefree_idempotency_expires;

ALTER TABLE racefree_idempotency_steps DROP CONSTRAINT racefree_idempotency_steps_pkey;
ALTER TABLE racefree_idempotency_steps ADD CONSTRAINT racefree_idempotency_steps_pkey PRIMARY KEY USING INDEX racefree_idempotency_steps_tenant_key;
DROP INDEX racefree_idempotency_steps_expires;

ALTER TABLE racefree_inbox_sources DROP CONSTRAINT racefree_inbox_sources_pkey;
ALTER TABLE racefree_inbox_sources ADD CONSTRAINT racefree_inbox_sources_pkey PRIMARY KEY USING INDEX racefree_inbox_sources_tenant_key;

ALTER TABLE racefree_inbox DROP CONSTRAINT racefree_inbox_pkey;
ALTER TABLE racefree_inbox ADD CONSTRAINT racefree_inbox_pkey PRIMARY KEY USING INDEX racefree_inbox_tenant_id;
ALTER TABLE racefree_inbox DROP CONSTRAINT racefree_inbox_source_event_id_key;
DROP INDEX racefree_inbox_source_seq;
DROP INDEX racefree_inbox_expires_at;

ALTER TABLE racefree_sequences DROP CONSTRAINT racefree_sequences_pkey;
ALTER TABLE racefree_sequences ADD CONSTRAINT racefree_sequences_pkey PRIMARY KEY USING INDEX racefree_sequences_tenant_key;

ALTER TABLE racefree_audit_heads DROP CONSTRAINT racefree_audit_heads_pkey;
ALTER TABLE racefree_audit_heads ADD CONSTRAINT racefree_audit_heads_pkey PRIMARY KEY USING INDEX racefree_audit_heads_tenant_key;

ALTER TABLE racefree_audit DROP CONSTRAINT racefree_audit_pkey;
ALTER TABLE racefree_audit ADD CONSTRAINT racefree_audit_pkey PRIMARY KEY USING INDEX racefree_audit_tenant_key;

ALTER TABLE racefree_audit_checkpoints DROP CONSTRAINT racefree_audit_checkpoints_pkey;
ALTER TABLE racefree_audit_checkpoints ADD CONSTRAINT racefree_audit_checkpoints_pkey PRIMARY KEY USING INDEX racefree_audit_checkpoints_tenant_key;

ALTER TABLE racefree_quotas DROP CONSTRAINT racefree_quotas_pkey;
ALTER TABLE racefree_quotas ADD CONSTRAINT racefree_quotas_pkey PRIMARY KEY USING INDEX racefree_quotas_tenant_key;
DROP INDEX racefree_quotas_expires_at;

ALTER TABLE racefree_quota_ledger DROP CONSTRAINT racefree_quota_ledger_pkey;
ALTER TABLE racefree_quota_ledger ADD CONSTRAINT racefree_quota_ledger_pkey PRIMARY KEY USING INDEX racefree_quota_ledger_tenant_key;
DROP INDEX racefree_quota_ledger_expires_at;

ALTER TABLE racefree_claims ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_claim_floors ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_dedup_events ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_idempotency ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_idempotency_steps ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_inbox_sources ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_inbox ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_sequences ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_audit_heads ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_audit ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_audit_checkpoints ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_quotas ALTER COLUMN tenant DROP DEFAULT;
ALTER TABLE racefree_quota_ledger ALTER COLUMN tenant DROP DEFAULT;

ALTER TABLE racefree_claims ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_claims FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_claims
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_claim_floors ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_claim_floors FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_claim_floors
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_dedup_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_dedup_events FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_dedup_events
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_idempotency ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_idempotency FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_idempotency
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_idempotency_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_idempotency_steps FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_idempotency_steps
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_inbox_sources ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_inbox_sources FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_inbox_sources
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_inbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_inbox FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_inbox
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_sequences ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_sequences FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_sequences
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_audit_heads ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_audit_heads FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_audit_heads
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_audit
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_audit_checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_audit_checkpoints FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_audit_checkpoints
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_quotas ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_quotas FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_quotas
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_quota_ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_quota_ledger FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_quota_ledger
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_onetime_codes ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_onetime_codes FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_onetime_codes
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_refresh_families ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_refresh_families FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_refresh_families
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_refresh_retired ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_refresh_retired FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_refresh_retired
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

ALTER TABLE racefree_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenant ON racefree_keys
  USING (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')))
  WITH CHECK (tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));

-- The tenant registry holds ids only. Anyone may read it (the reapers
-- visit each tenant under its own setting); a transaction may add only the
-- tenant it has set.
ALTER TABLE racefree_tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE racefree_tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY racefree_tenants_read ON racefree_tenants FOR SELECT USING (true);
CREATE POLICY racefree_tenants_add ON racefree_tenants FOR INSERT
  WITH CHECK (id = (SELECT NULLIF(current_setting('racefree.tenant_id', true), '')));
