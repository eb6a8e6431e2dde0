-- durable_many: durable (durable.sql) for many deliveries in one
-- statement, as the combiner sends them (racefree.DB.Combine), after
-- receive_many and number_many in the same transaction: each parameter is
-- the array of one durable parameter, one element per delivery, in the
-- batch's order. It returns the place (from 1) of every event it locked,
-- which the batch reads and ignores.
-- $1 tenants, $2 sources, $3 event IDs
SELECT u.i
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(tenant, source, event_id, i)
JOIN racefree_inbox AS e ON e.tenant = u.tenant AND e.source = u.source AND e.event_id = u.event_id
WHERE current_setting('synchronous_standby_names') <> ''
ORDER BY u.i
FOR KEY SHARE OF e
