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
// election are one atomic upsert.
package dedup
