-- Audit retention: Log.Prune deletes a scope's oldest entries, 1 through
-- floor_seq, and re-anchors the chain there. The head row keeps the anchor
-- (floor_seq, the MAC of the last entry deleted and the key epoch after
-- it) where Verify starts; a racefree.audit.pruned entry appended to the
-- chain in the same transaction records the same anchor under the scope's
-- MAC key, and Verify accepts the missing prefix only when it finds that
-- entry. 0, '' and '': nothing was ever pruned.
ALTER TABLE racefree_audit_heads
  ADD COLUMN floor_seq BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN floor_mac BYTEA  NOT NULL DEFAULT ''::bytea,
  ADD COLUMN floor_key TEXT   NOT NULL DEFAULT '';
-- DELETE stays refused (SQLSTATE 42501), except of an entry at or below
-- its scope's floor while the scope's last entry is a racefree.audit.pruned
-- entry: the deliberate path Prune takes, in one transaction (append the
-- pruned entry, raise the floor, delete). A plain DELETE, or one after any
-- other entry, is refused as before. The application role has no DELETE
-- privilege at all (tenant.Grant): pruning is for the tables' owner, under
-- row-level security like every other call. Whoever raises the floor by
-- hand and deletes still cannot write the pruned entry's MAC without the
-- key, so Verify reports the cut. UPDATE and TRUNCATE stay refused.
CREATE FUNCTION racefree_audit_guard_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM racefree_audit_heads AS h
    JOIN racefree_audit AS p ON p.tenant = h.tenant AND p.scope = h.scope AND p.seq = h.last_seq
    WHERE h.tenant = OLD.tenant AND h.scope = OLD.scope AND OLD.seq <= h.floor_seq
      AND p.action = 'racefree.audit.pruned') THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'racefree: % is append-only: % refused', TG_TABLE_NAME, TG_OP
    USING ERRCODE = '42501';
END
$$;
DROP TRIGGER racefree_audit_append_only ON racefree_audit;
CREATE TRIGGER racefree_audit_append_only BEFORE UPDATE ON racefree_audit
  FOR EACH ROW EXECUTE FUNCTION racefree_audit_refuse();
CREATE TRIGGER racefree_audit_no_delete BEFORE DELETE ON racefree_audit
  FOR EACH ROW EXECUTE FUNCTION racefree_audit_guard_delete();
