-- acquire_legacy: the compatible mode for a schema before migration 002
-- (no lease columns). The first writer of a key wins it for good, as
-- INSERT … ON CONFLICT DO NOTHING always did; nobody else ever wins, so a
-- missing column never turns every caller into a winner.
-- $1 ns, $2 key, $3 holder, $4 clock
INSERT INTO racefree_claims (ns, key, holder, count, first_seen, last_seen)
SELECT $1, $2, $3, 1, now, now FROM (SELECT COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
WHERE true
ON CONFLICT (ns, key) DO NOTHING
RETURNING holder, count, first_seen, last_seen
