-- reap_families: delete up to a batch of the tenant's refresh-token
-- families whose live token expired at least grace ago, after
-- reap_retired deleted their retired tokens in the same transaction. No
-- token of such a family can rotate any more, so reuse detection has
-- nothing left to protect; a token presented afterwards is Unknown.
-- ?1 tenant, ?2 grace ms, ?3 batch, ?4 clock
DELETE FROM racefree_refresh_families
WHERE tenant = ?1 AND family IN (
  SELECT o.family FROM racefree_refresh_families AS o
  WHERE o.tenant = ?1 AND o.head_expires_at <= COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - ?2
  ORDER BY o.head_expires_at, o.family LIMIT ?3)
