-- state: read the counter of ($1 tenant, $2 scope, $3 key, $4 kind) and
-- the clock ($5, NULL: clock_timestamp()) together, after a charge was
-- denied, so that the caller can say exactly how long to wait. A statement
-- of its own, so that at READ COMMITTED its snapshot sees every charge
-- that committed before the denial. It returns one row even when the
-- counter has no row (NULL tat and used: a full bucket).
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE tenant = $1 AND scope = $2 AND key = $3 AND kind = $4),
  (SELECT used FROM racefree_quotas WHERE tenant = $1 AND scope = $2 AND key = $3 AND kind = $4)
FROM (SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
