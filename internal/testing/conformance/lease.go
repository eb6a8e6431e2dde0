package conformance

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// leaseState is the model's claim: its holder and fence, and whether it
// is held (the TTL is long enough that it never lapses in the test).
type leaseState struct {
	holder string
	fence  int64
	held   bool
}

// LeaseInput is one call of LeaseModel: an acquire or a release.
type LeaseInput struct {
	Op     string // acquire, release
	Holder string
	Fence  int64 // release's
}

// LeaseOutput is a call's answer.
type LeaseOutput struct {
	OK     bool
	Err    string // held, not-held, stale-fence
	Holder string // acquire's: the winner, or the holder that refused it
	Fence  int64
}

// LeaseModel is the claim's sequential specification without time: an
// acquire of a free claim wins the next fence, the holder's own acquire
// keeps its fence, anyone else's is refused with the holder and fence; a
// release by the holder of that fence frees it, any other is refused as
// stale (an older fence) or not held.
var LeaseModel = porcupine.Model{
	Init: func() any { return leaseState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(leaseState), input.(LeaseInput), output.(LeaseOutput)
		switch in.Op {
		case "acquire":
			switch {
			case !st.held:
				next := leaseState{in.Holder, st.fence + 1, true}
				return out.OK && out.Holder == in.Holder && out.Fence == next.fence, next
			case st.holder == in.Holder:
				return out.OK && out.Fence == st.fence, st
			default:
				return !out.OK && out.Err == "held" && out.Holder == st.holder && out.Fence == st.fence, st
			}
		case "release":
			if st.fence > 0 && st.holder == in.Holder && st.fence == in.Fence {
				return out.OK, leaseState{st.holder, st.fence, false}
			}
			want := "not-held"
			if st.fence > in.Fence {
				want = "stale-fence"
			}
			return !out.OK && out.Err == want, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
}
