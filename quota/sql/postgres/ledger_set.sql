-- ledger_set: store the figures of the first charge of consumption key $3
-- of ($1 tenant, $2 scope) ($4 remaining, $5 reset_at ms), in the charging
-- transaction, for a replay to return: the smallest remaining and the latest
-- reset_at of the call's requests under the key.
UPDATE racefree_quota_ledger SET remaining = $4, reset_at = $5 WHERE tenant = $1 AND scope = $2 AND ckey = $3
