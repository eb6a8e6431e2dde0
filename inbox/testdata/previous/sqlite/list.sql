-- Events of a source in arrival order, one page bounded by count and by
-- payload bytes. ?1 source, ?2 after (exclusive), ?3 limit, ?4 byte bound.
-- The inner query reads at most ?3 rows in seq order (the (source, seq)
-- index) and sums their payload sizes as it goes: length() of a BLOB
-- column reads its size without loading it. The outer WHERE keeps the
-- events whose running total stays within ?4, and always the first one, so
-- a page holds at most ?4 bytes of payload, or one larger event, and never
-- stops before an event it could hold: the next page starts right after it.
SELECT seq, event_id, status, reason, payload, received_at
FROM (
  SELECT seq, event_id, status, reason, payload, received_at,
         row_number() OVER w AS n,
         sum(COALESCE(length(payload), 0)) OVER w AS bytes
  FROM racefree_inbox
  WHERE source = ?1 AND seq > ?2
  WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING)
  ORDER BY seq
  LIMIT ?3
) page
WHERE n = 1 OR bytes <= ?4
ORDER BY seq
