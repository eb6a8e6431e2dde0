-- get: the tenant's event and its downstream fields.
-- $1 tenant, $2 fingerprint
SELECT source, level, message, classification, external_id, result_fence
FROM racefree_dedup_events WHERE tenant = $1 AND fingerprint = $2
