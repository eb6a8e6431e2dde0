-- Audit retention: Log.Prune deletes a scope's oldest entries, 1 through
-- floor_seq, and re-anchors the chain there. The head row keeps the anchor
-- (floor_seq, the MAC of the last entry deleted and the key epoch after
-- it) where Verify starts; a racefree.audit.pruned entry appended to the
-- chain in the same transaction records the same anchor under the scope's
-- MAC key, and Verify accepts the missing prefix only when it finds that
-- entry. 0, X'' and '': nothing was ever pruned.
ALTER TABLE racefree_audit_heads ADD COLUMN floor_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE racefree_audit_heads ADD COLUMN floor_mac BLOB NOT NULL DEFAULT X'';
ALTER TABLE racefree_audit_heads ADD COLUMN floor_key TEXT NOT NULL DEFAULT '';
-- DELETE stays refused, except of an entry at or below its scope's floor
-- while the scope's last entry is a racefree.audit.pruned entry: the
-- deliberate path Prune takes, in one transaction (append the pruned
-- entry, raise the floor, delete). A plain DELETE, or one after any other
-- entry, is refused as before. Whoever raises the floor by hand and
-- deletes still cannot write the pruned entry's MAC without the key, so
-- Verify reports the cut.
DROP TRIGGER racefree_audit_no_delete;
CREATE TRIGGER racefree_audit_no_delete BEFORE DELETE ON racefree_audit
WHEN NOT EXISTS (
  SELECT 1 FROM racefree_audit_heads AS h
  JOIN racefree_audit AS p ON p.tenant = h.tenant AND p.scope = h.scope AND p.seq = h.last_seq
  WHERE h.tenant = OLD.tenant AND h.scope = OLD.scope AND OLD.seq <= h.floor_seq
    AND p.action = 'racefree.audit.pruned')
BEGIN SELECT RAISE(ABORT, 'racefree: racefree_audit is append-only: DELETE refused'); END;
