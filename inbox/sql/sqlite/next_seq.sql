-- Take the source's next arrival number. On PostgreSQL the row lock this
-- takes is held until commit, so numbers commit in order. ?1 tenant,
-- ?2 source.
INSERT INTO racefree_inbox_sources (tenant, source, last_seq) VALUES (?1, ?2, 1)
ON CONFLICT (tenant, source) DO UPDATE SET last_seq = racefree_inbox_sources.last_seq + 1
RETURNING last_seq
