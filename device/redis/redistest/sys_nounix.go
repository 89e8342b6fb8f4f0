//go:build !unix

package redistest

import "os"

var stopSignal, contSignal os.Signal
