// Command nrinop is a no-op NRI plugin for benchmarks, built only on
// github.com/containerd/nri's pkg/stub. It implements every handler the stub
// knows (Configure, Synchronize, Shutdown, the pod and container events,
// their Post* and Update* variants) and subscribes to every event except
// ValidateContainerAdjustment; every answer is empty, so what a runtime
// spends with it is the cost of delivering NRI events.
//
//	nrinop [-validate] [-count FILE] [-socket PATH] [-v]
//
// Launched by a runtime as a pre-installed plugin (an executable named
// NN-name in its plugin directory), it takes its name, index and connection
// from NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET; started by
// hand it connects to -socket. -validate also subscribes to
// ValidateContainerAdjustment and accepts every adjustment. -count FILE
// writes, when the plugin stops (the runtime closes the connection or sends
// SIGTERM), how many of each request and event it received, one
// "name count" line each and a last line "events N".
//
// Since a runtime launches pre-installed plugins without arguments, give
// them flags through a wrapper script installed as NN-name:
//
//	#!/bin/sh
//	exec /path/to/nrinop -count /tmp/counts/10-nop "$@"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "nrinop: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	validate := flag.Bool("validate", false, "also subscribe to ValidateContainerAdjustment (and accept every adjustment)")
	countFile := flag.String("count", "", "file to write the number of requests and events received to, on exit")
	socket := flag.String("socket", "", "NRI socket to connect to when not launched by the runtime (default: the stub's)")
	verbose := flag.Bool("v", false, "log the stub's informational messages too")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	// The runtime logs every line a launched plugin prints: keep quiet so
	// the figures do not include logging.
	logger := &quietLogger{verbose: *verbose, l: log.New(os.Stderr, "", 0)}
	nrilog.Set(logger)
	events := defaultEvents()
	if *validate {
		events.Set(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	}
	p := newNop(events)
	opts := []stub.Option{stub.WithLogger(logger)}
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		return fmt.Errorf("create stub: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = s.Run(ctx)
	// The runtime closing the connection (ErrServerClosed) or a signal is how
	// a plugin is meant to end.
	if errors.Is(err, ttrpc.ErrServerClosed) || errors.Is(err, context.Canceled) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("run plugin: %w", err)
	}
	if *countFile != "" {
		err = errors.Join(err, writeCountFile(p, *countFile))
	}
	return err
}

// writeCountFile writes the counts next to path, then renames, so a
// reader never sees half a file.
func writeCountFile(p *nop, path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write count file %s: %w", path, err)
	}
	werr := p.writeCounts(tmp)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write count file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write count file %s: %w", path, err)
	}
	return nil
}

// quietLogger prints warnings and errors; debug and info only with -v.
type quietLogger struct {
	verbose bool
	l       *log.Logger
}

var _ nrilog.Logger = (*quietLogger)(nil)

func (q *quietLogger) Debugf(_ context.Context, format string, args ...any) {
	if q.verbose {
		q.l.Printf("debug: "+format, args...)
	}
}

func (q *quietLogger) Infof(_ context.Context, format string, args ...any) {
	if q.verbose {
		q.l.Printf("info: "+format, args...)
	}
}

func (q *quietLogger) Warnf(_ context.Context, format string, args ...any) {
	q.l.Printf("warning: "+format, args...)
}

func (q *quietLogger) Errorf(_ context.Context, format string, args ...any) {
	q.l.Printf("error: "+format, args...)
}
