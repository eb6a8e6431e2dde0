-- state: read the counter of ($1 scope, $2 key, $3 kind) and the clock
-- ($4, NULL: clock_timestamp()) together, after a charge was denied, so
-- that the caller can say exactly how long to wait. A statement of its
-- own, so that at READ COMMITTED its snapshot sees every charge that
-- committed before the denial. It returns one row even when the counter
-- has no row (NULL tat and used: a full bucket).
SELECT now,
  (SELECT tat FROM racefree_quotas WHERE scope = $1 AND key = $2 AND kind = $3),
  (SELECT used FROM racefree_quotas WHERE scope = $1 AND key = $2 AND kind = $3)
FROM (SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
