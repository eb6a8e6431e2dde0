-- reap: delete up to ?1 expired records.
-- ?1 batch size, ?2 clock
DELETE FROM racefree_idempotency WHERE (scope, key) IN (
  SELECT scope, key FROM racefree_idempotency WHERE expires_at <= COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) LIMIT ?1
)
