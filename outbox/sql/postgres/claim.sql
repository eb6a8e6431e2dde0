-- claim: lease up to $3 due messages of tenant $1 to worker $5 until
-- now + $4 ms, in one statement. Due: ready and available, or leased and
-- lapsed (a lease lives while now < available_at). Each claimed row's
-- fence and attempts grow by one.
--
-- Rows another claimer has locked are skipped, never waited for (SKIP
-- LOCKED), so relays sharing the database do not queue behind each other.
-- FOR UPDATE re-checks the WHERE on the latest version of a row that
-- changed since the snapshot, and the UPDATE repeats the due test in its
-- own WHERE (invariant 10): a row claimed and committed by another relay
-- meanwhile is left out, never leased twice.
--
-- Ordered messages (per-key ordering) are claimable only when no older
-- message of their key is undelivered: ready, leased (retrying) or dead
-- (until redriven or discarded).
--
-- A lapsed lease it takes over (the row was leased before the claim) is
-- recorded in the attempt history by the statement itself (lapsed), and
-- the history beyond $7 entries dropped (pruned): the claim then needs no
-- second statement that waits for its rows, so on the pool it travels in
-- one round trip with its tenant and the completions it carries. Every
-- part of a statement runs to its end whether or not its result is read,
-- and sees the same snapshot: pruned cannot see, nor drop, the entry
-- lapsed adds: it keeps the latest $7 - 1 entries, and lapsed adds the
-- $7th. The lapse is recorded with the fence of the tenure that lapsed
-- (due.was_fence), and the cut is by rank, never by fence arithmetic:
-- fences may jump (below).
--
-- A failover: each claimed row's fence is at least the timeline's floor,
-- (timeline - 1) * 2^40 + 1, read once with the clock (tl_floor; the
-- timeline ID is the first 8 hex digits of the name of the WAL file being
-- written, and it goes up at every promotion). A failover that lost the
-- last commits lost leases the old primary acknowledged, and the new
-- primary's row holds an older fence: m.fence + 1 alone would hand the
-- same tenure out again, and a worker of the lost lease could complete
-- the new one. On timeline 1 the floor is 1 and changes nothing; the
-- bound and the assumption are claim's (claim/sql/postgres/acquire.sql).
--
-- The UPDATE probes the picked rows by primary key (= ANY (ARRAY(…))),
-- never by a join the planner could turn into a scan of the whole table.
-- $1 tenant, $2 topics (empty: every topic), $3 limit, $4 lease ms,
-- $5 worker, $6 clock (NULL: the database clock), $7 history size
WITH clock AS MATERIALIZED (
  SELECT COALESCE($6::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now,
    ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1) << 40) + 1 AS tl_floor
), due AS (
  SELECT m.id, m.state AS was, m.leased_by AS was_by, m.fence AS was_fence
    FROM racefree_outbox AS m
   WHERE m.tenant = $1
     AND m.state IN ('ready', 'leased')
     AND m.available_at <= (SELECT now FROM clock)
     AND (cardinality($2::text[]) = 0 OR m.topic = ANY ($2::text[]))
     AND (NOT m.ordered OR NOT EXISTS (
           SELECT 1 FROM racefree_outbox AS p
            WHERE p.tenant = m.tenant AND p.topic = m.topic AND p.key = m.key AND p.key <> ''
              AND p.id < m.id AND p.state IN ('ready', 'leased', 'dead')))
   ORDER BY m.available_at, m.id
   LIMIT $3
   FOR UPDATE OF m SKIP LOCKED
),
upd AS (
  UPDATE racefree_outbox AS m
     SET state        = 'leased',
         fence        = GREATEST(m.fence + 1, (SELECT tl_floor FROM clock)),
         attempts     = m.attempts + 1,
         available_at = (SELECT now FROM clock) + $4::bigint,
         leased_by    = $5
   WHERE m.tenant = $1 AND m.id = ANY (ARRAY(SELECT id FROM due))
     AND m.state IN ('ready', 'leased')
     AND m.available_at <= (SELECT now FROM clock)
  RETURNING m.id, m.topic, m.key, m.ordered, m.payload, m.headers, m.created_at, m.attempts, m.max_attempts,
            m.fence, m.available_at
),
lapsed AS (
  INSERT INTO racefree_outbox_attempts (tenant, message_id, fence, attempt, worker, at, outcome, error)
  SELECT $1, upd.id, due.was_fence, upd.attempts - 1, due.was_by, (SELECT now FROM clock), 'lapsed', 'the lease lapsed'
    FROM upd JOIN due ON due.id = upd.id
   WHERE due.was = 'leased'
  ON CONFLICT (tenant, message_id, fence) DO NOTHING
),
pruned AS (
  DELETE FROM racefree_outbox_attempts AS a
   USING upd JOIN due ON due.id = upd.id
   WHERE due.was = 'leased'
     AND a.tenant = $1 AND a.message_id = upd.id
     AND a.fence <= (SELECT k.fence FROM racefree_outbox_attempts AS k
                      WHERE k.tenant = $1 AND k.message_id = upd.id
                      ORDER BY k.fence DESC LIMIT 1 OFFSET $7::bigint - 1)
)
SELECT upd.id, upd.topic, upd.key, upd.ordered, upd.payload, upd.headers, upd.created_at, upd.attempts,
       upd.max_attempts, upd.fence, upd.available_at
  FROM upd
