package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/racefree/racefree"
)

// TestSettleRunsAWriteWhoseReplyWasLostFiveTimesAtMost: settle runs a
// write again while it fails with an error matching
// racefree.ErrUnavailable (its reply lost: it may have landed), five
// times in all and never a sixth, telling lost of each such error that
// it retries; a write that lands, or that fails otherwise, ends it at
// once; and a context that ended cuts the waits short, never the writes
// (here every wait: the test takes no time).
func TestSettleRunsAWriteWhoseReplyWasLostFiveTimesAtMost(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	lostReply := fmt.Errorf("reply lost: %w", racefree.ErrUnavailable)
	refused := errors.New("refused")
	for _, tc := range []struct {
		name   string
		errs   []error // the writes' errors in turn; the last repeats
		writes int
		told   int
		want   error
	}{
		{"lost every time", []error{lostReply}, settleTries, settleTries - 1, lostReply},
		{"lands at the third", []error{lostReply, lostReply, nil}, 3, 2, nil},
		{"lands at the last", []error{lostReply, lostReply, lostReply, lostReply, nil}, settleTries, settleTries - 1, nil},
		{"refused after a lost reply", []error{lostReply, refused}, 2, 1, refused},
		{"refused", []error{refused}, 1, 0, refused},
		{"lands", []error{nil}, 1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes, told := 0, 0
			err := settle(ended, func(err error) {
				if !errors.Is(err, racefree.ErrUnavailable) {
					t.Errorf("told of %v", err)
				}
				told++
			}, func() error {
				err := tc.errs[min(writes, len(tc.errs)-1)]
				writes++
				return err
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) || writes != tc.writes || told != tc.told {
				t.Fatalf("settle = %v after %d writes, %d told; want %v after %d, %d told", err, writes, told, tc.want, tc.writes, tc.told)
			}
		})
	}
	if settleTries != 5 {
		t.Fatalf("settleTries = %d; the docs promise five", settleTries)
	}
}
