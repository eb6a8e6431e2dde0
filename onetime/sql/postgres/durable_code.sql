-- durable_code: on a primary with a synchronous standby, lock the code
-- FOR KEY SHARE, so that a Consume refused from the code's row
-- (AlreadyUsed, Revoked, Expired: explain_code) commits only once the
-- standby has what it read. The redemption or revocation it reports was
-- committed by another transaction, and with a synchronous standby that
-- commit may be on the primary alone (its wait for the standby ended by a
-- cancel, such as pgx's on a timed-out request, or by a terminated
-- backend): a caller told "already used" about a redemption that a
-- failover loses would see the code redeemed again after it. The lock
-- writes WAL and takes an xid, the two things that make this
-- transaction's COMMIT (the statement's own, on the pool) wait for the
-- standby; its record is after the commit explain_code saw, so once the
-- standby has our commit it has that one. It runs after explain_code, as
-- a statement of its own, as the inbox's durable does. Without
-- synchronous_standby_names (a stable setting, so the planner tests it
-- once) it reads nothing and costs no xid, WAL or wait. KEY SHARE is the
-- weakest lock: consume's and revoke_codes' UPDATEs do not wait for it;
-- only the reaper's DELETE would, and it skips locked rows.
-- $1 tenant, $2 hash, $3 purpose
SELECT 1 FROM racefree_onetime_codes
WHERE tenant = $1 AND hash = $2 AND purpose = $3
  AND current_setting('synchronous_standby_names') <> ''
FOR KEY SHARE
