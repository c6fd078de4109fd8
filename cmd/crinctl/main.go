// Command crinctl inspects a running crind through its admin socket.
//
//	crinctl [--socket PATH | --config FILE] [--json] plugins
//	crinctl [--socket PATH | --config FILE] [--json] owners CONTAINER-ID
//	crinctl --version
//
// plugins lists the NRI plugins in invocation order; owners lists which NRI
// plugin set which field of a container. --json prints crind's answer as
// is. The socket is cri.admin_socket of crind's config (default
// /run/crin/crind-admin.sock); it is 0600, so crinctl runs as root.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/crin-dev/crin/internal/admin"
	"github.com/crin-dev/crin/internal/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// errUsage marks a bad command line (exit status 2).
var errUsage = errors.New("usage")

const usage = `usage: crinctl [--socket PATH | --config FILE] [--json] COMMAND
commands:
  plugins                 NRI plugins in invocation order
  owners CONTAINER-ID     which NRI plugin set which field of a container
flags:
  --socket PATH   crind's admin socket (default /run/crin/crind-admin.sock)
  --config FILE   read the admin socket path from crind's config
  --json          print crind's JSON answer as is
  --version       print the version
`

func main() {
	err := run(os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Print(usage)
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "crinctl:", err)
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "crinctl:", err)
		os.Exit(1)
	}
}

// options are the global flags, which may also follow the command.
type options struct {
	socket     string
	configPath string
	json       bool
}

func (o *options) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.socket, "socket", o.socket, "crind's admin socket (default: from --config, else "+defaultSocket()+")")
	fs.StringVar(&o.configPath, "config", o.configPath, "crind's config file, to find the admin socket in")
	fs.BoolVar(&o.json, "json", o.json, "print crind's JSON answer")
	return fs
}

func run(args []string, stdout io.Writer) error {
	var o options
	fs := o.flags("crinctl")
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if *showVersion {
		_, err := fmt.Fprintf(stdout, "crinctl %s\n", version)
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return fmt.Errorf("no command: %w", errUsage)
	}
	cmd := rest[0]
	sub := o.flags(cmd)
	if err := sub.Parse(rest[1:]); err != nil {
		return usageError(err)
	}
	socket, err := o.socketPath()
	if err != nil {
		return err
	}
	c := newClient(socket)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case cmd == "plugins" && sub.NArg() == 0:
		body, err := c.get(ctx, admin.PluginsPath)
		if err != nil || o.json {
			return printRaw(stdout, body, err)
		}
		var ps []admin.Plugin
		if err := json.Unmarshal(body, &ps); err != nil {
			return fmt.Errorf("decode crind's plugin list: %w", err)
		}
		return writePlugins(stdout, ps)
	case cmd == "owners" && sub.NArg() == 1:
		id := sub.Arg(0)
		body, err := c.get(ctx, admin.OwnersPath(id))
		if err != nil || o.json {
			return printRaw(stdout, body, err)
		}
		var owners map[string]string
		if err := json.Unmarshal(body, &owners); err != nil {
			return fmt.Errorf("decode crind's owners of %s: %w", id, err)
		}
		return writeOwners(stdout, owners)
	case cmd == "owners":
		return fmt.Errorf("owners takes one CONTAINER-ID: %w", errUsage)
	case cmd == "plugins":
		return fmt.Errorf("plugins takes no arguments: %w", errUsage)
	}
	return fmt.Errorf("unknown command %q: %w", cmd, errUsage)
}

// usageError classifies a flag parsing error.
func usageError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%v: %w", err, errUsage)
}

func printRaw(w io.Writer, body []byte, err error) error {
	if err != nil {
		return err
	}
	_, err = w.Write(body)
	return err
}

// socketPath is --socket, else the admin socket of --config, else the
// default config's.
func (o *options) socketPath() (string, error) {
	if o.socket != "" {
		return o.socket, nil
	}
	if o.configPath != "" {
		cfg, err := config.Load(o.configPath, config.MissingError)
		if err != nil {
			return "", err
		}
		return cfg.AdminSocketPath(), nil
	}
	return defaultSocket(), nil
}

func defaultSocket() string { return config.Default().AdminSocketPath() }

// client talks HTTP to crind's admin socket.
type client struct {
	socket string
	http   *http.Client
}

func newClient(socket string) *client {
	return &client{socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}}
}

// get returns the body of a 200 answer; any other answer is an error
// carrying crind's message.
func (c *client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://crind"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.dialError(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read crind's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e admin.Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("crind: %s", e.Error)
		}
		return nil, fmt.Errorf("crind answered %s", resp.Status)
	}
	return body, nil
}

// dialError says in words why crind could not be reached.
func (c *client) dialError(err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("crind is not running: no admin socket at %s (is crind started? pass --socket or --config)", c.socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("crind is not running: nothing listens on %s (a stale socket)", c.socket)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("permission denied on %s: the admin socket is root's (run crinctl as root)", c.socket)
	}
	return fmt.Errorf("talk to crind at %s: %w", c.socket, err)
}
