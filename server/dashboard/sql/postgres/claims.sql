-- claims: the tenant's live application claims (namespace ''), soonest to
-- lapse first (key breaking ties), and the clock they were read at; only
-- those whose key and holder begin with the filter's ('' for any), and,
-- past the first page, only those after the sort key (expires_at, key) of
-- the previous page's last row. Bounded by the limit; the (tenant, ns,
-- expires_at) index serves the order, so a page load costs what it shows,
-- not the table. Display only: nothing is decided on it.
-- $1 tenant, $2 clock, $3 limit, $4 key prefix, $5 holder prefix,
-- $6 after expires_at (NULL: the first page), $7 after key
WITH c(now) AS (SELECT COALESCE($2::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))
SELECT key, holder, fence, expires_at, c.now
FROM racefree_claims, c
WHERE tenant = $1 AND ns = '' AND expires_at > c.now
  AND left(key, char_length($4::text)) = $4::text AND left(holder, char_length($5::text)) = $5::text
  AND ($6::bigint IS NULL OR (expires_at, key) > ($6::bigint, $7::text))
ORDER BY expires_at, key
LIMIT $3
