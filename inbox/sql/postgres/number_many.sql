-- number_many: number (number.sql) for many deliveries in one statement,
-- sent after receive_many in the same transaction, with its first three
-- arrays (one element per delivery, in the batch's order). A delivery
-- whose event receive_many inserted finds it unnumbered (number.sql says
-- why no other row is); a duplicate finds it numbered and gets no row.
--
-- Several deliveries of one source share a batch (their keys differ by
-- event ID), so the statement numbers them together: it advances each
-- source's counter once, by the count of its unnumbered events, and gives
-- them the numbers that follow the counter's previous value, in the
-- arrays' order (row_number within the source). Numbers stay gapless
-- (each counted event gets one) and distinct (one counter update per
-- source, on the locked row's latest value). Counter rows are locked in
-- (tenant, source) order, the same in every batch, and stay locked until
-- commit, so numbers commit in order.
--
-- It returns one row per numbered delivery, led by its place in the
-- arrays (from 1): the rows of an UPDATE come back in no promised order.
-- A batch holds one delivery per (source, event ID) (the combiner's key):
-- two deliveries of one event would both count it.
-- $1 tenants, $2 sources, $3 event IDs
WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(tenant, source, event_id, i)
), ev AS (
  SELECT u.i, e.tenant, e.source, e.id,
         row_number() OVER (PARTITION BY e.tenant, e.source ORDER BY u.i) AS n
  FROM input AS u
  JOIN racefree_inbox AS e ON e.tenant = u.tenant AND e.source = u.source AND e.event_id = u.event_id
  WHERE e.seq IS NULL
), counts AS (
  SELECT tenant, source, count(*) AS c FROM ev GROUP BY tenant, source
), counter AS (
  INSERT INTO racefree_inbox_sources AS s (tenant, source, last_seq)
  SELECT tenant, source, c FROM counts ORDER BY tenant, source
  ON CONFLICT (tenant, source) DO UPDATE SET last_seq = s.last_seq + excluded.last_seq
  RETURNING s.tenant, s.source, s.last_seq
)
UPDATE racefree_inbox AS e SET seq = counter.last_seq - counts.c + ev.n
FROM ev
JOIN counts ON counts.tenant = ev.tenant AND counts.source = ev.source
JOIN counter ON counter.tenant = ev.tenant AND counter.source = ev.source
WHERE e.tenant = ev.tenant AND e.id = ev.id AND e.seq IS NULL
RETURNING ev.i, e.seq
