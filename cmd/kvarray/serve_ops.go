package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/kvarray/kvarray/array"
	"github.com/kvarray/kvarray/config"
	"github.com/kvarray/kvarray/mechanism"
)

// newLogger returns serve's event log on w: slog text, or JSON.
func newLogger(w io.Writer, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// protectedMode refuses, as Redis's protected mode does, to serve beyond
// loopback while the default user has no password: anyone who reaches
// the port could then read, overwrite and delete everything.
func protectedMode(listen string, sc *config.Serve) error {
	if !sc.Protected() || sc.Requirepass != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("serve: --listen %q: %w", listen, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("serve: protected mode: --listen %s reaches beyond this machine, and the default user has no password; set requirepass in the config file (and give clients the password), or listen on 127.0.0.1, or set protected_mode: false in the config file if every host that can reach %s is trusted", listen, listen)
}

// listenTLS listens on the tls_port of the config, on the host of listen.
func listenTLS(cfg *config.Config, listen string) (net.Listener, error) {
	sc := cfg.Serve
	cert, err := tls.LoadX509KeyPair(cfg.Path(sc.TLSCertFile), cfg.Path(sc.TLSKeyFile))
	if err != nil {
		return nil, fmt.Errorf("tls_cert_file / tls_key_file: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if sc.TLSCACertFile != "" {
		pem, err := os.ReadFile(cfg.Path(sc.TLSCACertFile))
		if err != nil {
			return nil, fmt.Errorf("tls_ca_cert_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_cert_file %s: no PEM certificate in it", sc.TLSCACertFile)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(sc.TLSPort)))
	if err != nil {
		return nil, fmt.Errorf("tls_port: %w", err)
	}
	return tls.NewListener(l, tc), nil
}

// watchStates logs every change of a device's state (failed, back,
// rebuilding) every interval until ctx ends, starting with the devices
// not healthy at start: serve says when it starts degraded.
func watchStates(ctx context.Context, a *array.Array, log *slog.Logger, every time.Duration) {
	last := make([]mechanism.State, a.N())
	var degraded []any
	for i := range last {
		last[i] = a.DeviceState(i)
		if last[i] != mechanism.Healthy {
			degraded = append(degraded, slog.String("device "+strconv.Itoa(i), last[i].String()))
		}
	}
	if len(degraded) > 0 {
		log.Warn("starting degraded: 'kvarray status' says what to do", degraded...)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range last {
			st := a.DeviceState(i)
			if st == last[i] {
				continue
			}
			switch {
			case st == mechanism.Failed:
				log.Warn("device failed", "device", i, "was", last[i].String())
			case st == mechanism.Full:
				log.Warn("device full: read-only until space is freed; writes miss it and are recorded", "device", i, "was", last[i].String())
			case st == mechanism.Slow:
				log.Warn("device slow: skipped until it answers as fast as its peers; writes miss it and are recorded", "device", i, "was", last[i].String())
			case st == mechanism.Healthy && last[i] == mechanism.Failed:
				log.Info("device back", "device", i)
			case st == mechanism.Healthy:
				log.Info("device healthy", "device", i, "was", last[i].String())
			default:
				log.Info("device "+st.String(), "device", i, "was", last[i].String())
			}
			last[i] = st
		}
	}
}
