-- set_timeline: record on the head row the timeline the chain's entries
-- are now appended on, under the row's lock (lock_head_timeline), in the
-- transaction that appends the racefree.audit.timeline_changed entry (or,
-- on a row written before migration 018, the first entry of this release).
-- $1 tenant, $2 scope, $3 timeline
UPDATE racefree_audit_heads SET timeline = $3 WHERE tenant = $1 AND scope = $2
