-- reap_codes: delete up to a batch of the tenant's codes that expired at
-- least grace ago (used or not: an expired code can never be redeemed, so
-- it is safe to forget; a code presented afterwards is Unknown).
-- ?1 tenant, ?2 grace ms, ?3 batch, ?4 clock
DELETE FROM racefree_onetime_codes
WHERE tenant = ?1 AND hash IN (
  SELECT o.hash FROM racefree_onetime_codes AS o
  WHERE o.tenant = ?1 AND o.expires_at <= COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) - ?2
  ORDER BY o.expires_at LIMIT ?3)
