-- reap_steps: delete up to ?1 expired recovery points.
-- ?1 batch size, ?2 clock
DELETE FROM racefree_idempotency_steps WHERE (scope, key, step) IN (
  SELECT scope, key, step FROM racefree_idempotency_steps WHERE expires_at <= COALESCE(?2, CAST(unixepoch('subsec') * 1000 AS INTEGER)) LIMIT ?1
)
