-- issue_refresh: start a refresh-token family whose only live token (head)
-- is the new token, stored by its SHA-256 only. The family is named by
-- the hash of its first token. Each token of the family lives ttl from
-- the rotation that issued it.
-- $1 tenant, $2 hash, $3 subject, $4 ttl ms, $5 clock (NULL: the database clock)
INSERT INTO racefree_refresh_families (tenant, family, subject, ttl_ms, head, head_expires_at, generation, created_at)
SELECT $1, $2, $3, $4::bigint, $2, clock.now + $4::bigint, 1, clock.now
FROM (SELECT COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS clock
RETURNING head_expires_at, generation
