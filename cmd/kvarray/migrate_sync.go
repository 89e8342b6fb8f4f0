package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"

	"github.com/kvarray/kvarray/internal/transfer"
)

// syncSource asks a running Redis for its RDB through SYNC, as
// `redis-cli --rdb` does (transfer.Link.Sync): AUTH when the URL has a
// password. The connection is closed when ctx ends or the caller closes
// it.
func syncSource(ctx context.Context, raw string) (io.Reader, int64, io.Closer, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return nil, 0, nil, fmt.Errorf("import: %q is not redis://[USER:PASSWORD@]HOST:PORT", raw)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	pw, _ := u.User.Password()
	l, err := transfer.Dial(ctx, host, u.User.Username(), pw)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("import from %s: %w", host, err)
	}
	r, n, err := l.Sync()
	if err != nil {
		l.Close()
		return nil, 0, nil, fmt.Errorf("import from %s: %w", host, err)
	}
	return r, n, l, nil
}
