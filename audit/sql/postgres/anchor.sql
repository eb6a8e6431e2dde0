-- anchor: the entry a pruning ends at: its MAC (which the next entry's
-- prev_mac carries) and what its key epoch after it is made of.
-- $1 tenant, $2 scope, $3 seq
SELECT mac, key_id, action, subject FROM racefree_audit WHERE tenant = $1 AND scope = $2 AND seq = $3
