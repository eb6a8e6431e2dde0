-- consume_gcra_fold: ?8 charges of ?4 units each to the GCRA counter of
-- (?1 tenant, ?2 scope, ?3 key), decided at once, in this one statement,
-- as ?8 runs of consume_gcra.sql one after the other at the one clock ?7
-- decide them (?5 is the emission interval T in ms, ?6 the burst B).
--
-- From t = max(tat, now) (now for a key with no row), each charge of n
-- is allowed when t + n*T <= now + B*T, and then moves t to t + n*T;
-- a refused charge moves nothing. The charges being of one size, once
-- one is refused none after it fits: the charges allowed are the first
-- k = min(?8, (now + B*T - t) / (n*T)) (integer division, 0 when
-- negative), and the counter ends at t + k*n*T. The DO UPDATE's WHERE
-- is k >= 1; with k = 0, SQLite writes nothing and returns no row. A key
-- with no row admits min(?8, B / n) >= 1 (n <= B is checked before).
-- It returns the counter after the last charge allowed. ?7 is never
-- NULL here: the batch binds its clock (racefree.DB.Combine).
INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
SELECT ?1, ?2, ?3, 'gcra', ?7 + k * ?4 * ?5, 0, ?7, ?7 + k * ?4 * ?5
FROM (SELECT MIN(?8, ?6 / ?4) AS k) AS fresh
WHERE k >= 1
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  tat        = MAX(q.tat, excluded.updated_at) + MIN(?8, (excluded.updated_at + ?6 * ?5 - MAX(q.tat, excluded.updated_at)) / (?4 * ?5)) * ?4 * ?5,
  updated_at = excluded.updated_at,
  expires_at = MAX(q.tat, excluded.updated_at) + MIN(?8, (excluded.updated_at + ?6 * ?5 - MAX(q.tat, excluded.updated_at)) / (?4 * ?5)) * ?4 * ?5
WHERE excluded.updated_at + ?6 * ?5 - MAX(q.tat, excluded.updated_at) >= ?4 * ?5
RETURNING tat
