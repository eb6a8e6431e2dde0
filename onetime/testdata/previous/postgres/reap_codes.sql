-- reap_codes: delete up to a batch of the tenant's codes that expired at
-- least grace ago (used or not: an expired code can never be redeemed, so
-- it is safe to forget; a code presented afterwards is Unknown). Rows a
-- concurrent transaction holds locked are skipped, not waited for, and
-- the expiry test is repeated in the DELETE's own WHERE.
-- $1 tenant, $2 grace ms, $3 batch, $4 clock
WITH clock AS (
  SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
)
DELETE FROM racefree_onetime_codes AS c
USING clock
WHERE c.tenant = $1 AND c.expires_at <= clock.now - $2::bigint
  AND c.hash IN (
    SELECT o.hash FROM racefree_onetime_codes AS o, clock
    WHERE o.tenant = $1 AND o.expires_at <= clock.now - $2::bigint
    ORDER BY o.expires_at LIMIT $3
    FOR UPDATE OF o SKIP LOCKED)
