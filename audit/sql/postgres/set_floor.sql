-- set_floor: raise a tenant's scope's retention floor to the anchor of a
-- pruning, under the head's lock taken by prune_head; never lowers it.
-- $1 tenant, $2 scope, $3 floor seq, $4 its MAC, $5 key epoch after it
UPDATE racefree_audit_heads SET floor_seq = $3, floor_mac = $4, floor_key = $5
WHERE tenant = $1 AND scope = $2 AND floor_seq < $3
