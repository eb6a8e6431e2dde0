-- issue: store a new one-time code, by the SHA-256 of its token only, live
-- from now until now + ttl. The token is 256 random bits, so the primary
-- key (tenant, hash) never conflicts in practice; if it ever did, the
-- INSERT fails rather than handing one code to two subjects.
-- $1 tenant, $2 hash, $3 purpose, $4 subject, $5 ttl ms, $6 clock (NULL: the database clock)
INSERT INTO racefree_onetime_codes (tenant, hash, purpose, subject, issued_at, expires_at)
SELECT $1, $2, $3, $4, clock.now, clock.now + $5::bigint
FROM (SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
RETURNING issued_at, expires_at
