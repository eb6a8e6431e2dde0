-- get: the event and its downstream fields.
-- $1 fingerprint
SELECT source, level, message, classification, external_id, result_fence
FROM racefree_dedup_events WHERE fingerprint = $1
