-- insert_event_many: insert_event for many observes in one statement, as
-- the combiner sends them (racefree.DB.Combine), after the claims'
-- acquire_many and raise_new_many in the same transaction: each parameter
-- is the array of one insert_event parameter, one element per observe, in
-- the batch's order (one observe per fingerprint). Each event is
-- remembered once, as insert_event does: a fingerprint whose row exists
-- keeps it, with its downstream fields.
--
-- It returns one row per event it inserted, led by the observe's place in
-- the arrays (from 1), joined back by (tenant, fingerprint): the rows of
-- an INSERT come back in no promised order. An observe whose event existed
-- gets no row, as insert_event alone affects none.
-- $1 tenants, $2 fingerprints, $3 sources, $4 levels, $5 messages
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
    WITH ORDINALITY AS u(tenant, fingerprint, source, level, message, i)
), inserted AS (
  INSERT INTO racefree_dedup_events (tenant, fingerprint, source, level, message)
  SELECT u.tenant, u.fingerprint, u.source, u.level, u.message FROM input AS u
  ORDER BY u.i
  ON CONFLICT (tenant, fingerprint) DO NOTHING
  RETURNING tenant, fingerprint
)
SELECT u.i FROM inserted AS e JOIN input AS u ON u.tenant = e.tenant AND u.fingerprint = e.fingerprint
