package device

import (
	"context"
	"fmt"
)

// Unavailable returns a Device that fails every call with ErrDeviceFailed
// and err as the reason. It stands in for a device that could not be
// opened, so that the array can still name it, report it as failed and
// serve from the others.
func Unavailable(name string, err error) Device { return &unavailable{name: name, err: err} }

type unavailable struct {
	name string
	err  error
}

func (u *unavailable) fail() error {
	return fmt.Errorf("%w: %v", ErrDeviceFailed, u.err)
}

func (u *unavailable) Store(context.Context, []byte, []byte) error      { return u.fail() }
func (u *unavailable) Retrieve(context.Context, []byte) ([]byte, error) { return nil, u.fail() }
func (u *unavailable) Delete(context.Context, []byte) error             { return u.fail() }
func (u *unavailable) Exist(context.Context, []byte) (bool, error)      { return false, u.fail() }
func (u *unavailable) Iterate(context.Context, []byte, func([]byte) error) error {
	return u.fail()
}
func (u *unavailable) Info(context.Context) (Info, error) { return Info{Name: u.name}, u.fail() }
func (u *unavailable) Close() error                       { return nil }
func (u *unavailable) Batch(_ context.Context, ops []Op) error {
	err := u.fail()
	for i := range ops {
		ops[i].Err = err
	}
	return err
}
