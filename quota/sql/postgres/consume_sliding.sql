-- consume_sliding: charge $4 units to the sliding-window counter of
-- ($1 tenant, $2 scope, $3 key) and record the charge, in this one
-- statement, or change nothing; either way it returns the decision and the
-- counter, in one round trip. $5 is the window length W in ms, $6 the
-- limit L, $7 the clock (NULL: the database clock, clock_timestamp(), read
-- once in the clock CTE).
--
-- Windows are aligned on the epoch: the current one starts at
-- s = now - now % W. The row holds the start of the window that used
-- counts (tat) and the count of the window before it (prev). Seen from
-- now, a row of window s counts (used, prev), a row of window s - W counts
-- (0, used) (its used is now the previous window's), an older row (0, 0).
-- The charge is allowed when the previous window's count, weighted by the
-- part of it that the sliding window [now - W, now] still overlaps, plus
-- the current count and n, is at most L:
--   prev * (W - (now - s)) / W + used + n <= L,
-- compared exactly, multiplied out by W (Policy.Validate bounds L * W by
-- 2^61, so no product overflows). A key with no row inserts used = n,
-- prev = 0 (n <= L is checked before). The DO UPDATE's WHERE is the
-- decision, evaluated on the row version the statement locked, after any
-- concurrent charge committed (invariant 10). Every SET and the WHERE read
-- the old row, so the shift of used into prev is computed against the old
-- tat. excluded carries now (updated_at) and s (tat). expires_at is s + 2W:
-- from then on the row counts (0, 0), the same as no row.
--
-- When the WHERE fails, nothing is written and "up" returns no row. "cur"
-- then reads the counter so that the caller can say exactly how long to
-- wait: FOR UPDATE makes it return the row version "up" locked and
-- refused, not the older one of the statement's snapshot. A row that a
-- concurrent charge inserted after the snapshot is not seen at all: the
-- statement then returns no row, and the caller reads the state in a
-- second statement.
WITH clock AS (
  SELECT COALESCE($7::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), up AS (
  INSERT INTO racefree_quotas AS q (tenant, scope, key, kind, tat, used, prev, updated_at, expires_at)
  SELECT $1, $2, $3, 'sliding_window', now - now % $5::bigint, $4::bigint, 0, now, now - now % $5::bigint + 2 * $5::bigint FROM clock
  ON CONFLICT (tenant, scope, key, kind) DO UPDATE SET
    used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + $4::bigint,
    prev       = CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - $5::bigint THEN q.used ELSE 0 END,
    tat        = excluded.tat,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at
  WHERE CASE WHEN q.tat = excluded.tat THEN q.prev WHEN q.tat = excluded.tat - $5::bigint THEN q.used ELSE 0 END * ($5::bigint - (excluded.updated_at - excluded.tat))
      + (CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + $4::bigint) * $5::bigint
      <= $6::bigint * $5::bigint
  RETURNING tat, used, prev, updated_at
), cur AS (
  SELECT c.tat, c.used, c.prev FROM racefree_quotas AS c
  WHERE c.tenant = $1 AND c.scope = $2 AND c.key = $3 AND c.kind = 'sliding_window' AND NOT EXISTS (SELECT 1 FROM up)
  FOR UPDATE
)
SELECT true AS allowed, tat, used, prev, updated_at FROM up
UNION ALL
SELECT false, cur.tat, cur.used, cur.prev, clock.now FROM cur, clock
