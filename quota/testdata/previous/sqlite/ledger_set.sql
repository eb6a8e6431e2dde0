-- ledger_set: store the figures of the first charge of consumption key ?2
-- of scope ?1 (?3 remaining, ?4 reset_at ms), in the charging transaction,
-- for a replay to return.
UPDATE racefree_quota_ledger SET remaining = ?3, reset_at = ?4 WHERE scope = ?1 AND ckey = ?2
