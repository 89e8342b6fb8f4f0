//go:build unix

package redistest

import (
	"os"
	"syscall"
)

var stopSignal, contSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT
