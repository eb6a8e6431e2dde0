package inbox

import "errors"

// PermanentError marks an error of the processing function as permanent:
// retrying the delivery cannot succeed (malformed payload, an event type the
// receiver does not handle, a reference to something that will never
// exist). Receive records it and acknowledges the delivery.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a permanent failure. It returns nil for nil.
//
// Mark only what is certain to fail again: an error not marked counts as
// transient, so the sender redelivers. Mistaking a transient failure for a
// permanent one silently drops an event; the opposite costs a retry.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
