-- consume_gcra: charge ?3 units to the GCRA counter of (?1 scope, ?2 key)
-- and record the charge, in this one statement, or change nothing.
-- ?4 is the emission interval T in ms (Per / Rate, rounded up), ?5 the
-- burst B, ?6 the clock (NULL: the process clock).
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
-- the row means the same as no row, and the reaper may delete it.
INSERT INTO racefree_quotas AS q (scope, key, kind, tat, used, updated_at, expires_at)
SELECT ?1, ?2, 'gcra', now + ?3 * ?4, 0, now, now + ?3 * ?4
FROM (SELECT COALESCE(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (scope, key, kind) DO UPDATE SET
  tat        = MAX(q.tat, excluded.updated_at) + ?3 * ?4,
  updated_at = excluded.updated_at,
  expires_at = MAX(q.tat, excluded.updated_at) + ?3 * ?4
WHERE MAX(q.tat, excluded.updated_at) + ?3 * ?4 <= excluded.updated_at + ?5 * ?4
RETURNING true AS allowed, tat, used, updated_at
