-- get: the key's live record; on a primary with a synchronous standby,
-- locked FOR KEY SHARE. A replay acknowledges a record that another
-- transaction committed, and with a synchronous standby that commit may be
-- on the primary alone (its wait for the standby ended by a cancel, such
-- as pgx's on a timed-out request, or by a terminated backend). The lock
-- writes WAL and takes an xid, the two things that make this
-- transaction's COMMIT wait for the standby (txid_current() alone takes an
-- xid but writes no WAL, and such a commit neither flushes nor waits); the
-- lock's record is after the record's commit, so once the standby has our
-- commit it has the record. Without synchronous_standby_names (a stable
-- setting, so the planner tests it once) the locking branch reads nothing
-- and the read costs what it did: no xid, no WAL, no flush, no wait.
-- KEY SHARE is the weakest lock: complete.sql and begin.sql's update do
-- not wait for it; only the reaper's DELETE would, and it skips locked
-- rows.
-- $1 tenant, $2 scope, $3 key, $4 clock
WITH durable AS (
  SELECT fingerprint, status, response FROM racefree_idempotency
  WHERE tenant = $1 AND scope = $2 AND key = $3 AND expires_at > COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
  AND current_setting('synchronous_standby_names') <> ''
  FOR KEY SHARE
)
SELECT fingerprint, status, response FROM durable
UNION ALL
SELECT fingerprint, status, response FROM racefree_idempotency
WHERE tenant = $1 AND scope = $2 AND key = $3 AND expires_at > COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
AND current_setting('synchronous_standby_names') = ''
