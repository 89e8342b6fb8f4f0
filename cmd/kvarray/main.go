// Command kvarray is the command-line interface to a kvarray array: it
// creates one (init), stores, reads, deletes and lists values, and reports
// the array's health (status). Run `kvarray --help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	stopProfile := startProfile()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stopProfile()
	stop()
	os.Exit(code)
}
