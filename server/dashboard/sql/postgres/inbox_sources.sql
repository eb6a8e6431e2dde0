-- inbox_sources: the tenant's webhook sources and the arrival number of
-- each one's last event (how many it has received), by name; only those
-- whose name begins with the filter's ('' for any), and, past the first
-- page, only those after the previous page's last. Bounded by the limit.
-- $1 tenant, $2 limit, $3 source prefix, $4 after source (NULL: the first page)
SELECT source, last_seq FROM racefree_inbox_sources
WHERE tenant = $1 AND left(source, char_length($3::text)) = $3::text AND ($4::text IS NULL OR source > $4::text)
ORDER BY source LIMIT $2
