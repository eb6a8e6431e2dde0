// Package dedup counts every occurrence of an event and elects exactly one
// observer per window to process it.
//
// Observe keeps one row per fingerprint (given, or derived from the source,
// the level and the normalised message). Every observation counts — count,
// first_seen and last_seen stay exact under any concurrency — and exactly
// one observer per window gets Process: true, with a fencing token. When
// the window lapses, the next observation wins again, once, with the fence
// one higher: unlike INSERT … ON CONFLICT DO NOTHING, which elects a winner
// once and never again.
//
// The winner does the downstream work (classify, open a ticket, page
// someone) and writes its outcome with Record, which succeeds only at the
// current fence: a winner that stalled past its window cannot overwrite the
// work of its successor, and a re-election never touches fields already
// written.
//
// Dedup is built on package claim (namespace "dedup"): counting and
// election are one atomic upsert. Observe, Record and Get take an
// executor: pass the caller's *sql.Tx to commit an observation or a result
// with the caller's own writes, or the *racefree.DB. With
// racefree.Config.Combine on (the default), Observe on the pool commits in batches with
// concurrent observes of other fingerprints (on SQLite also of the same
// fingerprint, one after the other, and claim calls), each with the
// outcome it has alone (Log.Observe). Reap
// forgets a fingerprint (its counts, its event row and its result) once its
// window lapsed at least a grace period ago; one observed again later
// starts a new window with a fence above every fence it had.
//
// Tenants: every fingerprint's counts, election, event row and result
// belong to the tenant the call's context names (tenant.With;
// tenant.Default when none), so two tenants observing the same event are
// counted, elected and recorded apart, and Reap forgets each tenant's
// lapsed fingerprints under that tenant only. Every call needs migration
// 011 and fails with racefree.ErrSchemaOutdated before it; tenants other
// than the default need migration 012.
//
// Sources, levels, messages, fingerprints and results are UTF-8 without a
// NUL byte; anything else, or a fence below 1, is an *racefree.InputError
// and writes nothing.
package dedup
