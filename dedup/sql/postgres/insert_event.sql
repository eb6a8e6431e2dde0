-- insert_event: remember what the fingerprint stands for in the tenant,
-- once. A re-claim never touches the row, so the downstream fields
-- survive it.
-- $1 tenant, $2 fingerprint, $3 source, $4 level, $5 message
INSERT INTO racefree_dedup_events (tenant, fingerprint, source, level, message)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, fingerprint) DO NOTHING
