-- durable: on a primary with a synchronous standby, lock the recorded
-- event FOR KEY SHARE, so that a delivery answered "duplicate" commits
-- only once the standby has the event. A duplicate acknowledges an event
-- that another transaction committed, and with a synchronous standby that
-- commit may be on the primary alone (its wait for the standby ended by a
-- cancel, such as pgx's on a timed-out request, or by a terminated
-- backend): a sender told "already processed" then stops sending an
-- event that a failover loses. The lock writes WAL and takes an xid, the
-- two things that make this transaction's COMMIT wait for the standby;
-- its record is after the event's commit, so once the standby has our
-- commit it has the event. It runs after receive (and number) in the same
-- transaction, as a statement of its own: at READ COMMITTED it sees an
-- event whose inserter receive waited for, which receive's snapshot does
-- not. Without synchronous_standby_names (a stable setting, so the
-- planner tests it once) it reads nothing and costs no xid, WAL or wait.
-- KEY SHARE is the weakest lock: number's UPDATE does not wait for it;
-- only the reaper's DELETE would, and it skips locked rows. In a batch it
-- also locks the events the batch inserted itself, which changes nothing.
-- $1 tenant, $2 source, $3 event ID
SELECT 1 FROM racefree_inbox
WHERE tenant = $1 AND source = $2 AND event_id = $3
  AND current_setting('synchronous_standby_names') <> ''
FOR KEY SHARE
