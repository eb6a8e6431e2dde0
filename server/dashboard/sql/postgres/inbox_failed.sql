-- inbox_failed: the tenant's latest deliveries that failed permanently
-- (inbox.Permanent: acknowledged, never retried), the inbox's dead
-- letters, newest first; only those of the filter's source ('' for any)
-- whose event id begins with the filter's ('' for any), and, past the
-- first page, only those older than (id below) the previous page's last
-- row. Bounded by the limit.
-- $1 tenant, $2 limit, $3 source, $4 event id prefix, $5 before id (NULL: the first page)
SELECT source, event_id, COALESCE(seq, 0), COALESCE(reason, ''), received_at, id
FROM racefree_inbox
WHERE tenant = $1 AND status = 'failed'
  AND ($3::text = '' OR source = $3::text) AND left(event_id, char_length($4::text)) = $4::text
  AND ($5::bigint IS NULL OR id < $5::bigint)
ORDER BY id DESC
LIMIT $2
