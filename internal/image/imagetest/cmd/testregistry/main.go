// Command testregistry serves an in-memory OCI registry on a loopback
// address with busybox pushed as <addr>/library/busybox:latest, for manual
// runs and demos:
//
//	testregistry -addr 127.0.0.1:5001
//	crictl pull 127.0.0.1:5001/library/busybox:latest
//
// It prints the image reference and its digest, then serves until
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

func main() {
	// A command owns the root of its context tree.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM) //nolint:forbidigo // main is the owner
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testregistry:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done.
func run(ctx context.Context) error {
	addr := flag.String("addr", "127.0.0.1:5001", "loopback address to listen on")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("parse -addr %q: %w", *addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-addr %q: only loopback addresses are served", *addr)
	}
	srv, hostPort, err := imagetest.Serve(*addr, imagetest.RegistryOptions{})
	if err != nil {
		return err
	}
	img, err := imagetest.BuildBusybox()
	if err != nil {
		_ = srv.Close()
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	digest, err := imagetest.PushImage(pctx, hostPort, "library/busybox:latest", img)
	cancel()
	if err != nil {
		_ = srv.Close()
		return err
	}
	fmt.Printf("%s/library/busybox:latest\n%s\n", hostPort, digest)

	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
