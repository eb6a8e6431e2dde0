-- receive_many: receive (receive.sql) for many deliveries in one
-- statement, as the combiner sends them (racefree.DB.Combine): each
-- parameter is the array of one receive parameter, one element per
-- delivery, in the batch's order (the order of the keys: one delivery per
-- (source, event ID)). It inserts every new event, unnumbered, and skips
-- every event ID already recorded; a delivery of an ID that another
-- transaction has inserted and not yet committed waits for it, and is
-- skipped if it commits. The rows are inserted in the arrays' order, the
-- order in which every batch takes the event IDs' index locks, so that
-- two batches never wait for each other in a cycle. It returns no rows:
-- number_many, next in the same transaction, finds what was inserted.
-- Each event reads the clock once, so its expiry is its arrival plus the
-- retention to the millisecond.
-- $1 tenants, $2 sources, $3 event IDs, $4 payloads, $5 clocks (NULL: the
-- database clock), $6 retentions in ms
INSERT INTO racefree_inbox (tenant, source, event_id, status, payload, received_at, expires_at)
SELECT u.tenant, u.source, u.event_id, 'processed', u.payload, t.now, t.now + u.retention
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], $6::bigint[])
  WITH ORDINALITY AS u(tenant, source, event_id, payload, clock, retention, i)
CROSS JOIN LATERAL (SELECT COALESCE(u.clock, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now) AS t
ORDER BY u.i
ON CONFLICT (tenant, source, event_id) DO NOTHING
