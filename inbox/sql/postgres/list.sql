-- Events of a source in arrival order, one page bounded by count and by
-- payload bytes. $1 tenant, $2 source, $3 after (exclusive), $4 limit,
-- $5 byte bound.
-- The inner query reads at most $4 rows in seq order (the
-- (tenant, source, seq) index) and sums their payload sizes as it goes:
-- octet_length reads the size without fetching the payload. The outer
-- WHERE keeps the events whose running total stays within $5, and always
-- the first one, so a page holds at most $5 bytes of payload, or one
-- larger event, and never stops before an event it could hold: the next
-- page starts right after it.
SELECT seq, event_id, status, reason, payload, received_at
FROM (
  SELECT seq, event_id, status, reason, payload, received_at,
         row_number() OVER w AS n,
         sum(COALESCE(octet_length(payload), 0)) OVER w AS bytes
  FROM racefree_inbox
  WHERE tenant = $1 AND source = $2 AND seq > $3
  WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING)
  ORDER BY seq
  LIMIT $4
) page
WHERE n = 1 OR bytes <= $5
ORDER BY seq
