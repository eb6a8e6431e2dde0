-- number: advance the source's counter to the number record gave the
-- event, earlier in this transaction, and return it. The event holds the
-- number after the counter only when record inserted it just now: every
-- committed event's number is at most the counter. For a duplicate the
-- statement changes nothing and returns no row.
-- ?1 tenant, ?2 source, ?3 event_id.
INSERT INTO racefree_inbox_sources (tenant, source, last_seq)
SELECT ?1, ?2, 1
WHERE EXISTS (
  SELECT 1 FROM racefree_inbox
  WHERE tenant = ?1 AND source = ?2 AND event_id = ?3
    AND seq = COALESCE((SELECT last_seq FROM racefree_inbox_sources WHERE tenant = ?1 AND source = ?2), 0) + 1
)
ON CONFLICT (tenant, source) DO UPDATE SET last_seq = racefree_inbox_sources.last_seq + 1
RETURNING last_seq
