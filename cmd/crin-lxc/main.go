// Command crin-lxc runs OCI bundles as LXC containers: it speaks the
// command line of an OCI runtime (runc's create, start, kill, delete,
// state, exec, update, pause, resume, features), so crind's oci backend
// and crin-shim drive it as they drive runc, and it does the work
// through liblxc (cgo). The spec is translated by internal/lxcconf;
// docs/runtimes.md ("LXC") says how, and what LXC cannot express.
//
// create writes the LXC config into the state dir (--root/<id>) and
// starts the monitor, a child that outlives crin-lxc (the calling
// crin-shim, a subreaper, inherits it); its pid is the --pid-file's. The
// monitor waits on a fifo for start, then runs the container in the
// foreground with liblxc, the container's stdio being its own, and exits
// as the container's init did.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// version is set by the build (-X main.version).
var version = "dev"

// errNotExist is a container crin-lxc does not know; the message is the
// one crind and crin-shim recognise ("does not exist").
var errNotExist = errors.New("container does not exist")

// attachOptions is an exec'd process.
type attachOptions struct {
	Args, Env  []string
	Cwd        string
	UID, GID   uint32
	Groups     []uint32
	NoNewPrivs bool
}

// lxcAPI is what crin-lxc asks of liblxc (liblxc_cgo.go).
type lxcAPI interface {
	Check(id string) error
	InitPid(id string) int
	State(id string) (string, error)
	Freeze(id string, on bool) error
	Attach(id string, a attachOptions) (int, error)
}

// cli is one invocation: the global flags and the JSON log.
type cli struct {
	root string
	log  io.Writer
	lxc  lxcAPI
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("crin-lxc", flag.ContinueOnError)
	root := fs.String("root", "/run/crin-lxc", "state dir")
	logPath := fs.String("log", "", "log file (JSON lines)")
	_ = fs.String("log-format", "json", "log format (json only)")
	systemd := fs.Bool("systemd-cgroup", false, "refused: crin-lxc takes cgroupfs paths")
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Printf("crin-lxc version %s\nspec: %s\n", version, specs.Version)
		return 0
	}
	c := &cli{root: *root, log: os.Stderr}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			defer f.Close()
			c.log = f
		}
	}
	c.lxc = newLXC(c.root)
	rest := fs.Args()
	if len(rest) == 0 {
		c.errorf("no command")
		return 2
	}
	if *systemd {
		c.errorf("--systemd-cgroup: crin-lxc does not support the systemd cgroup driver")
		return 1
	}
	if err := c.dispatch(rest[0], rest[1:]); err != nil {
		c.errorf("%v", err)
		return 1
	}
	return 0
}

func (c *cli) dispatch(cmd string, args []string) error {
	switch cmd {
	case "create":
		return c.create(args, false)
	case "run":
		return c.create(args, true)
	case "start":
		return c.start(args)
	case "kill":
		return c.kill(args)
	case "delete":
		return c.delete(args)
	case "state":
		return c.state(args)
	case "exec":
		return c.exec(args)
	case "update":
		return c.update(args)
	case "pause", "resume":
		return c.pause(args, cmd == "pause")
	case "features":
		return c.features()
	case "__hooks":
		return c.startHostHooks(args)
	case "checkpoint", "restore":
		return fmt.Errorf("%s: checkpoint and restore are not supported by crin-lxc", cmd)
	case "ps", "events", "spec", "list":
		return fmt.Errorf("%s: not implemented by crin-lxc", cmd)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// errorf writes an error record to the log, as runc's JSON log does.
func (c *cli) errorf(format string, args ...any) {
	rec, _ := json.Marshal(map[string]string{
		"level": "error", "msg": fmt.Sprintf(format, args...), "time": time.Now().UTC().Format(time.RFC3339Nano),
	})
	_, _ = fmt.Fprintf(c.log, "%s\n", rec)
}

// warnf writes a warning record to the log.
func (c *cli) warnf(format string, args ...any) {
	rec, _ := json.Marshal(map[string]string{
		"level": "warning", "msg": fmt.Sprintf(format, args...), "time": time.Now().UTC().Format(time.RFC3339Nano),
	})
	_, _ = fmt.Fprintf(c.log, "%s\n", rec)
}

// parse parses a command's flags and returns its positional arguments,
// which must number want.
func parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if len(rest) != want {
		return nil, fmt.Errorf("%s: want %d arguments, got %q", fs.Name(), want, rest)
	}
	if err := checkID(rest[0]); err != nil {
		return nil, err
	}
	return rest, nil
}

func checkID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("container id %q is not a file name", id)
	}
	return nil
}

func (c *cli) dir(id string) string { return filepath.Join(c.root, id) }

// state.json in the container's dir.
type stateFile struct {
	ID        string    `json:"id"`
	Bundle    string    `json:"bundle"`
	Rootfs    string    `json:"rootfs"`
	Created   time.Time `json:"created"`
	Monitor   int       `json:"monitor"`
	CgroupDir string    `json:"cgroupDir"`
	CgroupV2  bool      `json:"cgroupV2"`
}

func (c *cli) load(id string) (*stateFile, error) {
	data, err := os.ReadFile(filepath.Join(c.dir(id), "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", id, errNotExist)
	}
	if err != nil {
		return nil, err
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("read state of %s: %w", id, err)
	}
	return &st, nil
}

// writeFileAtomic writes data to path through a rename.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
