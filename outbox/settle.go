package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/racefree/racefree"
)

// settleTries is how many times settle runs a write whose reply may have
// been lost, the first included.
const settleTries = 5

// settle runs write, and runs it again, up to settleTries times in all
// with a doubling wait from 50 ms, while it fails with an error matching
// [racefree.ErrUnavailable]: its reply was lost, so it may have landed.
// Only writes that are safe to retry by the same tenure go through it:
// Fail, which finds the outcome it recorded, and Complete, which finds its
// delivery (ErrDelivered). lost, when not nil, is told each such error. It
// returns write's last error; ctx's end cuts a wait short, not a write.
func settle(ctx context.Context, lost func(error), write func() error) error {
	err := write()
	for try, wait := 1, 50*time.Millisecond; try < settleTries && errors.Is(err, racefree.ErrUnavailable); try, wait = try+1, wait*2 {
		if lost != nil {
			lost(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		err = write()
	}
	return err
}
