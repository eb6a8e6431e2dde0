-- consume_window: charge $3 units to the fixed-window counter of
-- ($1 scope, $2 key) and record the charge, in this one statement, or
-- change nothing. $4 is the window length in ms, $5 the limit per window,
-- $6 the clock (NULL: the database clock, clock_timestamp()).
--
-- Windows are aligned on the epoch: the current one starts at
-- now - now % $4. tat holds the start of the window that used counts; a
-- row of an earlier window counts as 0 used. A key with no row inserts
-- used = n (n <= limit is checked before). The DO UPDATE's WHERE is the
-- decision, evaluated on the row version the statement locked, after any
-- concurrent charge committed (invariant 10): when it fails, nothing is
-- written and no row is returned, and the caller reads the state to say
-- how long to wait. Every SET reads the old row, so used is computed
-- against the old tat. expires_at is the end of the window, after which
-- the row means the same as no row.
INSERT INTO racefree_quotas AS q (scope, key, kind, tat, used, updated_at, expires_at)
SELECT $1, $2, 'window', now - now % $4::bigint, $3::bigint, now, now - now % $4::bigint + $4::bigint
FROM (SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
ON CONFLICT (scope, key, kind) DO UPDATE SET
  used       = CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + $3::bigint,
  tat        = excluded.tat,
  updated_at = excluded.updated_at,
  expires_at = excluded.expires_at
WHERE CASE WHEN q.tat = excluded.tat THEN q.used ELSE 0 END + $3::bigint <= $5::bigint
RETURNING tat, used, updated_at
