-- create: a new key of tenant $1. Only the SHA-256 of its secret is stored.
-- $1 tenant, $2 id, $3 hash, $4 scopes, $5 name, $6 clock (NULL: the database clock)
INSERT INTO racefree_keys (tenant, id, hash, scopes, name, created_at)
VALUES ($1, $2, $3, $4, $5, COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint))
RETURNING created_at
