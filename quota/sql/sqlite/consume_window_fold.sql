-- consume_window_fold: ?8 charges of ?4 units each to the fixed-window
-- counter of (?1 tenant, ?2 scope, ?3 key), decided at once, in this one
-- statement, as ?8 runs of consume_window.sql one after the other at the
-- one clock ?7 decide them (?5 is the window length in ms, ?6 the limit
-- per window).
--
-- The window starts at now - now % ?5, and u is the counter's used in
-- it (0 for a row of an earlier window). Each charge of n is allowed
-- when u + n <= limit, and then adds n to u; a refused charge adds
-- nothing. The charges being of one size, once one is refused none
-- after it fits: the charges allowed are the first
-- k = min(?8, (limit - u) / n), and the counter ends at u + k*n. The DO
-- UPDATE's WHERE is k >= 1; with k = 0, SQLite writes nothing and
-- returns no row. Every SET reads the old row. A key with no row admits
-- min(?8, limit / n) >= 1 (n <= limit is checked before). It returns
-- the counter after the last charge allowed. ?7 is never NULL here: the
-- batch binds its clock (racefree.DB.Combine).
INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, updated_at, expires_at)
SELECT ?1, ?2, ?3, 'window', ?7 - ?7 % ?5, k * ?4, ?7, ?7 - ?7 % ?5 + ?5
FROM (SELECT MIN(?8, ?6 / ?4) AS k) AS fresh
WHERE k >= 1
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END
               + MIN(?8, (?6 - CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END) / ?4) * ?4,
  tat        = excluded.tat,
  updated_at = excluded.updated_at,
  expires_at = excluded.expires_at
WHERE CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + ?4 <= ?6
RETURNING tat, used
