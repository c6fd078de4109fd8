// Command webserver stands in for the nginx and httpd images critest runs:
// it serves a page on a port, says so on stdout with the name it was run
// by (critest looks for "httpd" in the httpd container's log), and can
// write its pid to a file (critest's PID namespace specs read
// /var/run/nginx.pid). The stand-in images install it as /usr/sbin/nginx
// and /usr/local/apache2/bin/httpd, so pidof finds it by those names.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	// A command owns the root of its context tree.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT) //nolint:forbidigo // main is the owner
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	port := flag.Int("port", 80, "TCP port to serve on, on every address")
	pidFile := flag.String("pidfile", "", "file to write the pid to once serving")
	// critest finds nginx's main process by the title nginx gives it
	// ("nginx: master process ..."), in /proc/1/cmdline: the flag's value
	// puts it there.
	_ = flag.String("title", "", "ignored; shows in the process's command line")
	flag.Parse()
	name := filepath.Base(os.Args[0])

	ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
	if err != nil {
		return err
	}
	if *pidFile != "" {
		if err := os.WriteFile(*pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			_ = ln.Close()
			return err
		}
	}
	page := fmt.Sprintf("<html><body>%s stand-in</body></html>\n", name)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, page)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Printf("%s: serving on %s\n", name, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
