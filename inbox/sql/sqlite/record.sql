-- record: record an event as processed, numbered, unless (tenant, source,
-- event_id) is already there; the combiner's form of receive, next_seq
-- and set_seq (racefree.DB.Combine), which needs no value from Go between
-- its statements. It gives the event the number after the source's
-- counter, and number, next in the same transaction, advances the counter
-- to it. A batch runs its deliveries' statements one after the other in
-- one write transaction (SQLite has one writer), so each delivery sees the
-- counter the one before it advanced. A duplicate inserts nothing.
-- ?1 tenant, ?2 source, ?3 event_id, ?4 payload, ?5 clock (NULL: engine
-- clock), ?6 retention in ms.
INSERT INTO racefree_inbox (tenant, source, event_id, seq, status, payload, received_at, expires_at)
VALUES (?1, ?2, ?3,
        COALESCE((SELECT last_seq FROM racefree_inbox_sources WHERE tenant = ?1 AND source = ?2), 0) + 1,
        'processed', ?4,
        COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)),
        COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?6)
ON CONFLICT (tenant, source, event_id) DO NOTHING
