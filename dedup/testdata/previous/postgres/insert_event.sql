-- insert_event: remember what the fingerprint stands for, once. A re-claim
-- never touches the row, so the downstream fields survive it.
-- $1 fingerprint, $2 source, $3 level, $4 message
INSERT INTO racefree_dedup_events (fingerprint, source, level, message)
VALUES ($1, $2, $3, $4)
ON CONFLICT (fingerprint) DO NOTHING
