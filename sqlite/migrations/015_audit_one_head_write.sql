-- Append writes its scope's head row once per entry: it reads the head
-- under the IMMEDIATE transaction's write lock, computes the entry's MAC
-- and inserts the entry, and this trigger, in the same statement, moves
-- the head to it (last number, MAC and, after a key rotation entry, the
-- new key epoch). Before, Append incremented the head first (next) and
-- this trigger wrote it again with the MAC. The head may therefore be at
-- the entry's number minus one (this release) or at the entry's number
-- (the previous release's Append, which incremented it first, during a
-- rollout); any other number is refused, and the primary key refuses a
-- number twice. changes() is the count of the trigger's own UPDATE.
DROP TRIGGER racefree_audit_chain;
CREATE TRIGGER racefree_audit_chain AFTER INSERT ON racefree_audit
BEGIN
  UPDATE racefree_audit_heads
     SET last_seq = NEW.seq,
         last_mac = NEW.mac,
         key_id = CASE WHEN NEW.action = 'racefree.audit.key_rotated' THEN NEW.subject ELSE key_id END
   WHERE tenant = NEW.tenant AND scope = NEW.scope AND last_seq IN (NEW.seq - 1, NEW.seq);
  SELECT RAISE(ABORT, 'racefree: an audit entry does not carry its head number') WHERE changes() = 0;
END;
