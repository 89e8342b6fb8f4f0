package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestVersionAndCompletion: --version prints the build's version (the Go
// version at least, which every build records), and cobra's completion
// command is on.
func TestVersionAndCompletion(t *testing.T) {
	out := ok(t, nil, "--version")
	if !strings.HasPrefix(out, "kvarray ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
		t.Errorf("--version printed %q", out)
	}
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := ok(t, nil, "completion", sh); !strings.Contains(out, "kvarray") {
			t.Errorf("completion %s printed no script for kvarray: %.80q", sh, out)
		}
	}
}
