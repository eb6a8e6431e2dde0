// Package client is a Go client of racefree's HTTP API (racefree serve),
// with the method names and error values of the library: a claim held by
// another is a *claim.HeldError carrying the live holder (errors.Is
// racefree.ErrHeld), a stale fence a *claim.StaleFenceError
// (racefree.ErrStaleFence), bad input a *racefree.InputError, so code
// written against claim.Store or quota.Limiter branches the same way on
// the client's errors.
//
// Every state-changing call carries an Idempotency-Key that the client
// generates once per call and sends again on each retry: a call whose reply
// was lost (a transport error, a 503) is retried and answered with the
// outcome the server recorded for the first attempt (Idempotent-Replayed),
// so a retried Acquire returns the caller's own claim and a retried
// Consume is charged once. Release is the exception: it carries no key,
// and when a retry after an attempt that got no answer is refused (a
// stale fence, not held), the lost attempt may have released the claim,
// so Release answers an *OutcomeUnknownError (racefree.ErrUnavailable),
// not the refusal.
package client
