package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvarray/kvarray/device/faultdev"
	"github.com/kvarray/kvarray/mechanism"
)

// TestFullIsOOM: a write refused because too many of its devices are
// full (marked so, or answering full) gets Redis's OOM reply, which
// clients know, followed by the array's detail naming the devices; a
// failed device's refusal does not.
func TestFullIsOOM(t *testing.T) {
	const oom = "OOM command not allowed when used memory > 'maxmemory'. "
	for _, err := range []error{
		fmt.Errorf("store \"k\": devices [2 3 4] of [2 3 4] are full: %w", mechanism.ErrMarkedFull),
		fmt.Errorf("store \"k\": %w", faultdev.ErrInjectedFull),
	} {
		if got := errorReply(err); !strings.HasPrefix(got, oom) || !strings.Contains(got, err.Error()) {
			t.Errorf("errorReply(%v) = %q, want %q and the detail", err, got, oom)
		}
	}
	if got := errorReply(fmt.Errorf("store: %w", mechanism.ErrMarkedFailed)); strings.HasPrefix(got, "OOM") {
		t.Errorf("a failed device's refusal replies %q", got)
	}
}
