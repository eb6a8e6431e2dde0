-- reap_events: delete the tenant's event rows of the fingerprints whose
-- claims claim's reap just deleted in the same transaction ($2, a JSON
-- array of fingerprints). Those claim rows stay locked until commit, so no
-- Observe can re-create a fingerprint in between: it waits, then starts
-- afresh.
-- $1 tenant, $2 fingerprints (JSON array)
DELETE FROM racefree_dedup_events
WHERE tenant = $1 AND fingerprint IN (SELECT jsonb_array_elements_text($2::jsonb))
