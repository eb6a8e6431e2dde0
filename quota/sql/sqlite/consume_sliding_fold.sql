-- consume_sliding_fold: ?8 charges of ?4 units each to the sliding-window
-- counter of (?1 tenant, ?2 scope, ?3 key), decided at once, in this one
-- statement, as ?8 runs of consume_sliding.sql one after the other at
-- the one clock ?7 decide them (?5 is the window length W in ms, ?6 the
-- limit L).
--
-- Seen from now, in the window that starts at s = now - now % W, the row
-- counts (cur, last) as consume_sliding.sql reads it. Each charge of n is
-- allowed when last * (W - (now - s)) + (cur + n) * W <= L * W, and then
-- adds n to cur; a refused charge adds nothing. The charges being of one
-- size, once one is refused none after it fits: the charges allowed are
-- the first k = min(?8, (L * W - last * (W - (now - s)) - cur * W) / (n * W)),
-- and the counter ends at cur + k * n, with last as its prev. The DO
-- UPDATE's WHERE is k >= 1; with k = 0, SQLite writes nothing and
-- returns no row. Every SET and the WHERE read the old row. A key with no
-- row admits min(?8, L / n) >= 1 (n <= L is checked before). It returns
-- the counter after the last charge allowed. ?7 is never NULL here: the
-- batch binds its clock (racefree.DB.Combine).
INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, prev, updated_at, expires_at)
SELECT ?1, ?2, ?3, 'sliding_window', ?7 - ?7 % ?5, k * ?4, 0, ?7, ?7 - ?7 % ?5 + 2 * ?5
FROM (SELECT MIN(?8, ?6 / ?4) AS k) AS fresh
WHERE k >= 1
ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
  used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END
               + MIN(?8, (?6 * ?5
                 - CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - ?5 THEN q.used ELSE 0 END * (?5 - (excluded.updated_at - excluded.tat))
                 - CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END * ?5) / (?4 * ?5)) * ?4,
  prev       = CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - ?5 THEN q.used ELSE 0 END,
  tat        = excluded.tat,
  updated_at = excluded.updated_at,
  expires_at = excluded.expires_at
WHERE CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - ?5 THEN q.used ELSE 0 END * (?5 - (excluded.updated_at - excluded.tat))
    + (CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + ?4) * ?5
    <= ?6 * ?5
RETURNING tat, used, prev
