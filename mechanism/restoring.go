package mechanism

import (
	"context"
)

type restoringKey struct{}

// WithRestoring returns a context under which reads addressed to device
// dev, while it is being rebuilt, are not sent: each fails at once with
// ErrStale, as a read of a piece the device lacks does. A rebuild repairs
// under it: what dev must hold is decided from the other devices alone (a
// read of the device being restored is one wasted operation per piece),
// and a repair rewrites a piece it did not read.
func WithRestoring(ctx context.Context, dev int) context.Context {
	return context.WithValue(ctx, restoringKey{}, dev)
}

// skipRestoringReads answers the reads of ops that WithRestoring keeps
// from the device being restored, and returns the ops left to send with
// their indices in ops; at is nil when there is nothing to skip.
func (e *Env) skipRestoringReads(ctx context.Context, ops []Op) (rest []Op, at []int) {
	dev, ok := ctx.Value(restoringKey{}).(int)
	if !ok || dev < 0 || dev >= e.N() || e.State(dev) != Rebuilding {
		return nil, nil
	}
	skip := false
	for i := range ops {
		if ops[i].Dev == dev && !isWrite(ops[i].Kind) {
			skip = true
			break
		}
	}
	if !skip {
		return nil, nil
	}
	at = []int{}
	for i := range ops {
		op := &ops[i]
		if op.Dev == dev && !isWrite(op.Kind) {
			op.Result, op.Found = nil, false
			op.Err = &DeviceError{Dev: dev, Name: e.names[dev], Op: op.Kind, Key: op.Key, Err: ErrStale}
			continue
		}
		rest = append(rest, *op)
		at = append(at, i)
	}
	return rest, at
}
