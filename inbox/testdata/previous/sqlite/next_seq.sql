-- Take the source's next arrival number. On PostgreSQL the row lock this
-- takes is held until commit, so numbers commit in order. ?1 source.
INSERT INTO racefree_inbox_sources (source, last_seq) VALUES (?1, 1)
ON CONFLICT (source) DO UPDATE SET last_seq = racefree_inbox_sources.last_seq + 1
RETURNING last_seq
