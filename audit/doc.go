// Package audit keeps a tamper-evident audit log: per-tenant, per-scope
// chains of entries, each numbered gaplessly and MACed over its
// predecessor's MAC, and signed checkpoints that, kept outside the
// database, also reveal a cut tail or the restore of an older copy.
//
// Log.Append numbers an entry within its tenant's scope and chains it:
//
//	mac = HMAC-SHA256(scope key, canonical(version, [tenant,] scope, seq,
//	                           prev_mac, time, actor, action, subject, data))
//
// where every field is length-prefixed, so that no two different entries
// encode alike, and time is the engine's clock. The scope key is derived
// from the keyring's mac key with HKDF-SHA256 and the scope, so a leaked key
// of one scope says nothing about another. The tenant is in the MAC input
// unless it is the default one (see Tenants).
//
// # One lock orders numbering and chaining
//
// The chain head (last number, last MAC, key epoch) lives in a head row per
// scope, racefree_audit_heads. Append reads it under the row's lock
// (SELECT … FOR UPDATE; on SQLite the IMMEDIATE transaction's write lock),
// held until the transaction ends, so the number after it and the previous
// MAC belong to this entry alone; it computes the MAC and inserts the
// entry, and a trigger moves the head to the entry in the same statement
// (number, MAC and, after a rotation entry, key epoch), refusing an entry
// whose number does not follow the head's. The head row is written once
// per entry (migration 015; before it, an upsert incremented the number
// and the trigger wrote the MAC, a second write, and the trigger still
// accepts that order during a rollout, and the primary key a number only
// once in either).
// A rollback gives the number back and leaves no entry. Scopes never wait
// for each other. The head is audit's own rather than a package seq
// counter because the MAC and the key epoch must change under the same
// lock as the number: a counter row that holds only a number would need a
// second row, and a second lock, for the chain.
//
// # A lost reply
//
// When the connection to PostgreSQL breaks after COMMIT was sent and
// before its reply arrived, the commit may have happened and nobody can
// tell. Append on the pool, which commits by itself, then returns an
// error matching racefree.ErrUnavailable with its entry committed, and
// Append called again appends the same entry a second time under the next
// number. racefree never appends it again by itself. In the caller's
// transaction the entry commits or not with the caller's writes, and
// re-reading those settles it. Log.AppendKeyed settles it wherever
// nothing else does: it records a request key with the entry in the same
// transaction (an idempotency record), and the retry with the same key
// gets the stored record back and appends nothing.
//
// # Keys
//
// A Keyring holds mac keys by id (the last listed is current) and Ed25519
// checkpoint keys, loaded from a file or the environment (EnvKeys), never
// from the database. When a scope's key is not the current one, Append
// first appends an ActionKeyRotated entry linking the old key id to the
// new; Verify then refuses an entry under a key outside its epoch. Errors,
// String and %#v name key ids only.
//
// # What Verify detects
//
// Verify streams a tenant's scope's chain (a long one in contiguous parts
// at once, joined at their boundaries) and reports the first break with
// its Kind: Modified, Missing, Reordered, UnknownKey, KeyOutsideEpoch,
// Truncated, RolledBack, BadCheckpoint. A bare MAC chain cannot tell a log
// whose tail was cut (head row included) or that was restored from an
// older copy from an intact one: both are valid chains. Log.Checkpoint
// signs the head and chains the checkpoint to the previous one; exported
// (WriteCheckpoints) and given back to Verify, it reveals both.
//
// # Tenants
//
// Every call runs for the tenant its context names (tenant.From: Default
// when none; tenant.With or tenant.InTx name another). A chain is (tenant,
// scope): the scope is a namespace inside the tenant, the tenant leads the
// keys of the heads, entries and checkpoints, and every statement filters
// by it; on PostgreSQL (migration 012) row-level security keeps tenants
// apart a second time, and each call runs in a transaction whose tenant is
// set (package tenant). The chain trigger finds the head of the entry's own
// tenant and scope (migrations 011 and 012).
//
// The MAC binds the tenant, so that an entry copied into another tenant's
// chain (say, by someone with write access to the tables) is reported
// Modified: an entry of a tenant other than Default is MACed with format
// version 2, followed by the tenant and then the fields above. The default
// tenant's entries keep format version 1, without a tenant field: the
// chains written before tenancy, which migration 011 gives to the default
// tenant, verify unchanged, and the version byte keeps the two encodings
// apart. A checkpoint's signature covers the tenant the same way, and
// Verify refuses a checkpoint of another tenant (BadCheckpoint); a
// checkpoint exported before tenancy has no tenant and is the default
// tenant's.
//
// Every call needs migration 011: before it, each fails with
// racefree.ErrSchemaOutdated and writes nothing. Tenants other than
// Default need 012. During a rollout, between 011 and 012, the previous
// release's statements still append and verify (their rows are the
// default tenant's); 012 ends that.
//
// # Across a failover
//
// On PostgreSQL a promoted asynchronous standby may lack the last commits
// of the primary it replaces: entries that primary acknowledged are gone,
// and the new primary hands their numbers to other entries, so the chain
// alone verifies intact. The head row records the timeline its last entry
// was appended on (migration 018, TimelineVersion; NULL before), read in
// the statement that locks it; the first Append on another timeline first
// appends an ActionTimelineChanged entry, MACed like any other, naming the
// old and new timeline and the last entry the new primary holds, and moves
// the head's timeline. Verify reports each such entry in
// Result.PossibleLoss and Result.Warnings and the chain still intact: only
// checkpoints of the old timeline kept outside the database can tell
// whether entries after it were lost. A head the previous release wrote
// (NULL) records no move at its first failover; SQLite has no timelines.
//
// # Append-only
//
// A trigger refuses UPDATE and DELETE of entries and checkpoints on both
// engines, and TRUNCATE on PostgreSQL. The owner of the tables can still
// drop the triggers: run the application as a role that owns nothing (see
// docs/audit.md) and keep checkpoints elsewhere.
//
// # Retention
//
// Log.Prune deletes a scope's oldest entries, 1 through an anchor, as an
// explicit, audited operation (migration 014): in one transaction, under
// the head row's lock, it appends an ActionPruned entry recording the
// anchor (its number, its MAC and the key epoch after it), raises the head
// row's retention floor to the anchor, deletes the entries at or below it
// and signs a checkpoint of the new head. The delete trigger lets an entry
// go only at or below its scope's floor while the scope's last entry is
// an ActionPruned entry, which is Prune's transaction and nothing else's.
// Verify starts at the floor, and accepts the missing prefix only when the
// chain holds the ActionPruned entry, MACed under the scope's key, naming
// that exact anchor: a prefix cut any other way is still Missing, with the
// floor raised by hand too. On PostgreSQL the application role has no
// DELETE privilege on the entries, so the tables' owner prunes.
package audit
