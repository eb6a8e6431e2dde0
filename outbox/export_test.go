package outbox

// Listening returns a channel closed once r LISTENs (tests).
func Listening(r *Relay) <-chan struct{} { return r.listening }
