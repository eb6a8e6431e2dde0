-- consume_gcra: charge ?4 units to the GCRA counter of (?1 tenant, ?2
-- scope, ?3 key) and record the charge, in this one statement, or change
-- nothing. ?5 is the emission interval T in ms (Per / Rate, rounded up),
-- ?6 the burst B, ?7 the clock (NULL: the process clock).
--
-- The counter is its theoretical arrival time (tat): the instant at which
-- the bucket is full again. A charge moves it to max(tat, now) + n*T and is
-- allowed when that is at most now + B*T, i.e. when at least n of the B
-- units have refilled. A key with no row is a full bucket: the INSERT
-- starts it at now + n*T (n <= B is checked before). The DO UPDATE's WHERE
-- is the decision: when it fails, SQLite writes nothing and returns no row,
-- and the caller reads the state to say how long to wait (SQLite has no
-- data-modifying CTE to read it in; in-process, the second read costs
-- little). excluded.updated_at
-- carries now into the DO UPDATE. expires_at is the new tat: from then on
-- the row means the same as no row, and the reaper may delete it. The
-- conflict target is the key that leads with the tenant.
INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
SELECT ?1, ?2, ?3, 'gcra', now + ?4 * ?5, 0, now, now + ?4 * ?5
FROM (SELECT COALESCE(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  tat        = MAX(q.tat, excluded.updated_at) + ?4 * ?5,
  updated_at = excluded.updated_at,
  expires_at = MAX(q.tat, excluded.updated_at) + ?4 * ?5
WHERE MAX(q.tat, excluded.updated_at) + ?4 * ?5 <= excluded.updated_at + ?6 * ?5
RETURNING true AS allowed, tat, used, updated_at
