-- number: give the event that receive inserted, earlier in this
-- transaction, its arrival number, in one statement (the combiner sends
-- both at once and cannot pass receive's row id on). It finds the event
-- by (tenant, source, event ID) unnumbered: the row this transaction
-- inserted, since every transaction numbers its event before it commits,
-- so no committed row is unnumbered and no other transaction's row is in
-- sight. When receive skipped a duplicate, the event found is numbered
-- already and the statement changes nothing and returns no row. Otherwise
-- it takes the source's next number from its counter row, which stays
-- locked until commit (numbers commit in order: List relies on it), and
-- returns it. The predicate is repeated in the UPDATE's own WHERE
-- (invariant 10), though no other transaction can touch the row.
-- $1 tenant, $2 source, $3 event ID
WITH ev AS (
  SELECT id FROM racefree_inbox
  WHERE tenant = $1 AND source = $2 AND event_id = $3 AND seq IS NULL
), counter AS (
  INSERT INTO racefree_inbox_sources AS s (tenant, source, last_seq)
  SELECT $1, $2, 1 FROM ev
  ON CONFLICT (tenant, source) DO UPDATE SET last_seq = s.last_seq + 1
  RETURNING s.last_seq
)
UPDATE racefree_inbox AS e SET seq = counter.last_seq
FROM ev, counter
WHERE e.tenant = $1 AND e.id = ev.id AND e.seq IS NULL
RETURNING e.seq
