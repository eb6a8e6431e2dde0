-- retire: record the token that rotate just replaced, so that presenting
-- it again is recognised as reuse. It runs in rotate's transaction (on
-- PostgreSQL, rotate's own statement does this).
-- ?1 tenant, ?2 hash of the retired token, ?3 family, ?4 when it was retired
INSERT INTO racefree_refresh_retired (tenant, hash, family, retired_at) VALUES (?1, ?2, ?3, ?4)
