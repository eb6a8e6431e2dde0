-- prune: delete a tenant's scope's entries at or below the floor. The
-- delete trigger lets them go only because set_floor raised the floor and
-- the scope's last entry is the pruned entry that records it.
-- $1 tenant, $2 scope, $3 floor seq
DELETE FROM racefree_audit WHERE tenant = $1 AND scope = $2 AND seq <= $3
