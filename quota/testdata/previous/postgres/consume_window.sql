-- consume_window: charge $3 units to the fixed-window counter of
-- ($1 scope, $2 key) and record the charge, in this one statement, or
-- change nothing; either way it returns the decision and the counter, in
-- one round trip. $4 is the window length in ms, $5 the limit per window,
-- $6 the clock (NULL: the database clock, clock_timestamp(), read once in
-- the clock CTE).
--
-- Windows are aligned on the epoch: the current one starts at
-- now - now % $4. tat holds the start of the window that used counts; a
-- row of an earlier window counts as 0 used. A key with no row inserts
-- used = n (n <= limit is checked before). The DO UPDATE's WHERE is the
-- decision, evaluated on the row version the statement locked, after any
-- concurrent charge committed (invariant 10). Every SET reads the old row,
-- so used is computed against the old tat. expires_at is the end of the
-- window, after which the row means the same as no row.
--
-- When the WHERE fails, nothing is written and "up" returns no row. "cur"
-- then reads the counter so that the caller can say exactly how long to
-- wait: it runs after "up" (it reads it), and FOR UPDATE makes it return
-- the row version "up" locked and refused, not the older one of the
-- statement's snapshot (the lock is already this transaction's). A row
-- that a concurrent charge inserted after the snapshot is not seen at all:
-- the statement then returns no row, and the caller reads the state in a
-- second statement.
WITH clock AS (
  SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
), up AS (
  INSERT INTO racefree_quotas AS q (scope, key, kind, tat, used, updated_at, expires_at)
  SELECT $1, $2, 'window', now - now % $4::bigint, $3::bigint, now, now - now % $4::bigint + $4::bigint FROM clock
  ON CONFLICT (scope, key, kind) DO UPDATE SET
    used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + $3::bigint,
    tat        = excluded.tat,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at
  WHERE CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + $3::bigint <= $5::bigint
  RETURNING tat, used, updated_at
), cur AS (
  SELECT c.tat, c.used FROM racefree_quotas AS c
  WHERE c.scope = $1 AND c.key = $2 AND c.kind = 'window' AND NOT EXISTS (SELECT 1 FROM up)
  FOR UPDATE
)
SELECT true AS allowed, tat, used, updated_at FROM up
UNION ALL
SELECT false, cur.tat, cur.used, clock.now FROM cur, clock
