-- Events of a source in arrival order. $1 source, $2 after (exclusive), $3 limit.
SELECT seq, event_id, status, reason, payload, received_at
FROM racefree_inbox
WHERE source = $1 AND seq > $2
ORDER BY seq
LIMIT $3
