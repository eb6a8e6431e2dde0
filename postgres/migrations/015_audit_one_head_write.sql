-- Append writes its scope's head row once per entry: it reads the head
-- with SELECT … FOR UPDATE (the row's lock, held until the transaction
-- ends, orders numbering and chaining as before), computes the entry's MAC
-- and inserts the entry, and this trigger, in the same statement, moves
-- the head to it (last number, MAC and, after a key rotation entry, the
-- new key epoch). Before, Append incremented the head first (an upsert)
-- and this trigger wrote it again with the MAC. The head may therefore be
-- at the entry's number minus one (this release) or at the entry's number
-- (the previous release's Append, which incremented it first, during a
-- rollout); any other number is refused, and the primary key refuses a
-- number twice.
CREATE OR REPLACE FUNCTION racefree_audit_chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE racefree_audit_heads
     SET last_seq = NEW.seq,
         last_mac = NEW.mac,
         key_id = CASE WHEN NEW.action = 'racefree.audit.key_rotated' THEN NEW.subject ELSE key_id END
   WHERE tenant = NEW.tenant AND scope = NEW.scope AND last_seq IN (NEW.seq - 1, NEW.seq);
  IF NOT FOUND THEN
    RAISE EXCEPTION 'racefree: audit entry % of scope % does not carry its head number', NEW.seq, NEW.scope
      USING ERRCODE = '23514';
  END IF;
  RETURN NULL;
END
$$;
