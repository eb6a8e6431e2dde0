-- insert: write one entry. The PRIMARY KEY (tenant, scope, seq) refuses a
-- number handed out twice, whatever the code above it does; the trigger
-- racefree_audit_chain moves the head of the entry's own tenant and scope
-- to it (number, MAC and, after a rotation entry, key epoch), refusing a
-- number that does not follow the head's (migration 015).
-- $1 tenant, $2 scope, $3 seq, $4 at, $5 actor, $6 action, $7 subject,
-- $8 data, $9 key id, $10 prev_mac, $11 mac
INSERT INTO racefree_audit (tenant, scope, seq, at, actor, action, subject, data, key_id, prev_mac, mac)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
