package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// maxCommandOutput caps what is kept of a runtime command's stdout/stderr.
const maxCommandOutput = 1 << 20

// runtimeLogPrefix starts the name of the file, in StateDir, that a
// runtime command run by crind logs to (removed after it; at start-up,
// removeLeftovers removes those of a crind that was killed).
const runtimeLogPrefix = ".runtime-log-"

// isRuntimeNotExist reports an error of a runtime that does not know the
// container (runc: "container does not exist", crun: "... No such file").
func isRuntimeNotExist(err error) bool {
	var re *runtime.RuntimeError
	if !errors.As(err, &re) {
		return false
	}
	m := strings.ToLower(re.Msg)
	return strings.Contains(m, "does not exist") || strings.Contains(m, "not found") ||
		strings.Contains(m, "no such file")
}

type runOpts struct {
	stdin   []byte
	timeout time.Duration // the backend's CommandTimeout when 0
}

// run runs the runtime with its global flags and args, with a timeout, and
// returns its stdout. The error is a *RuntimeError with the runtime's
// messages.
func (o *Runtime) run(ctx context.Context, opts runOpts, args ...string) ([]byte, error) {
	logPath, err := o.makeRuntimeLog()
	if err != nil {
		return nil, fmt.Errorf("%s %s: make log: %w", o.cfg.Name, args[0], err)
	}
	if logPath != "" {
		defer os.Remove(logPath)
	}

	timeout := opts.timeout
	if timeout <= 0 {
		timeout = o.cfg.CommandTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	global := shim.Config{RuntimeRoot: o.cfg.Root, SystemdCgroup: o.cfg.SystemdCgroup}.RuntimeFlags()
	argv := global
	if logPath != "" {
		argv = append(argv, "--log", logPath, "--log-format", "json")
	}
	argv = append(argv, args...)
	cmd := exec.CommandContext(cctx, o.cfg.Binary, argv...)
	if opts.stdin != nil {
		cmd.Stdin = bytes.NewReader(opts.stdin)
	}
	stdout := &cappedBuffer{max: maxCommandOutput}
	stderr := &cappedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if cctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, cctx.Err())
		}
		return nil, &runtime.RuntimeError{Runtime: o.cfg.Name, Args: args, Msg: runtimeMessage(logPath, stderr.Bytes()), Err: err}
	}
	return stdout.Bytes(), nil
}

// makeRuntimeLog makes an empty file for the runtime's log of one
// command and returns its path. On a full disk (no inode left: ENOSPC,
// EDQUOT) it returns "": the runtime then logs to its stderr, which
// run reads instead, so that a kill or a delete, which kubelet asks for
// to free the disk, does not fail for want of a log file.
func (o *Runtime) makeRuntimeLog() (string, error) {
	f, err := os.CreateTemp(o.cfg.StateDir, runtimeLogPrefix+"*")
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), nil
}

func runtimeMessage(logPath string, stderr []byte) string {
	var msgs []string
	if data, err := os.ReadFile(logPath); logPath != "" && err == nil {
		if m := shim.ParseRuntimeLog(data); m != "" {
			msgs = append(msgs, m)
		}
	}
	if s := strings.TrimSpace(string(stderr)); s != "" {
		msgs = append(msgs, s)
	}
	return strings.Join(msgs, "; ")
}

// runtimeStatus is the part of "<runtime> state" output crin uses.
type runtimeStatus struct {
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

func (o *Runtime) runtimeState(ctx context.Context, id string) (runtimeStatus, error) {
	var st runtimeStatus
	out, err := o.run(ctx, runOpts{timeout: 30 * time.Second}, "state", id)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("decode %s state: %w", o.cfg.Name, err)
	}
	return st, nil
}

// Update runs "<runtime> update --resources -". A stopped container is
// errdefs.ErrFailedPrecondition.
func (o *Runtime) Update(ctx context.Context, id string, res *specs.LinuxResources) error {
	if res == nil {
		return fmt.Errorf("update container %s: no resources: %w", id, errdefs.ErrInvalidArgument)
	}
	st, err := o.Status(ctx, id)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	if st.State != runtime.StateCreated && st.State != runtime.StateRunning {
		return fmt.Errorf("update container %s: container is %s: %w", id, st.State, errdefs.ErrFailedPrecondition)
	}
	if dir := o.dir(id); pending(dir) {
		// The runtime does not know it yet: its bundle is what it will
		// be created with.
		if err := updateBundle(dir, res); err != nil {
			return fmt.Errorf("update container %s: %w", id, err)
		}
		return nil
	}
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("update container %s: encode resources: %w", id, err)
	}
	if _, err := o.run(ctx, runOpts{stdin: data}, "update", "--resources", "-", id); err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	return nil
}

// Exec has the container's shim run the process (see execInShim), with
// stdout and stderr captured apart and each capped at req.MaxOutput. When
// req.Timeout (or ctx) expires the shim kills the process and the error
// wraps ctx's error (context.DeadlineExceeded for a timeout); the output
// so far is returned, with ExitCode -1. A process that ran and failed is
// not an error: see ExitCode. A container that is not running is
// errdefs.ErrFailedPrecondition.
func (o *Runtime) Exec(ctx context.Context, id string, req runtime.ExecRequest) (runtime.ExecResult, error) {
	if len(req.Args) == 0 {
		return runtime.ExecResult{}, fmt.Errorf("exec in container %s: no args: %w", id, errdefs.ErrInvalidArgument)
	}
	max := req.MaxOutput
	if max <= 0 {
		max = maxCommandOutput
	}
	stdout, stderr := &cappedBuffer{max: max}, &cappedBuffer{max: max}
	tctx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	code, err := o.execInShim(tctx, id, req.Args, false, shim.ExecStreams{Stdout: stdout, Stderr: stderr})
	res := runtime.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: code}
	return res, err
}

// Features runs "<runtime> features". Runtimes without that command (crun
// before 1.9, runc before 1.1) get a Features that claims only the OCI
// versions read from "<runtime> --version" ("spec: 1.0.0").
func (o *Runtime) Features(ctx context.Context) (*features.Features, error) {
	out, ferr := o.run(ctx, runOpts{timeout: 30 * time.Second}, "features")
	if ferr == nil {
		var f features.Features
		if err := json.Unmarshal(out, &f); err != nil {
			return nil, fmt.Errorf("%s features: decode: %w", o.cfg.Name, err)
		}
		return &f, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ver, err := exec.CommandContext(cctx, o.cfg.Binary, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s features: %w; --version: %w", o.cfg.Name, ferr, err)
	}
	f, ok := featuresFromVersion(ver)
	if !ok {
		return nil, fmt.Errorf("%s features: %w; no spec version in --version output", o.cfg.Name, ferr)
	}
	return f, nil
}

// featuresFromVersion reads the "spec: X" line of a runtime's --version.
func featuresFromVersion(out []byte) (*features.Features, bool) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(strings.ToLower(k)) != "spec" {
			continue
		}
		if v = strings.TrimSpace(v); v != "" {
			return &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: v}, true
		}
	}
	return nil, false
}

// cappedBuffer keeps the first max bytes written and drops the rest, so a
// chatty process cannot exhaust memory (nor block on a full pipe).
type cappedBuffer struct {
	max int
	buf bytes.Buffer
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Bytes returns what was kept (nil when nothing was written).
func (b *cappedBuffer) Bytes() []byte {
	if b.buf.Len() == 0 {
		return nil
	}
	return bytes.Clone(b.buf.Bytes())
}

var _ io.Writer = (*cappedBuffer)(nil)

// updateBundle sets the resources of the spec in bundle dir.
func updateBundle(dir string, res *specs.LinuxResources) error {
	path := filepath.Join(dir, shim.ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("decode bundle: %w", err)
	}
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	spec.Linux.Resources = res
	if data, err = json.Marshal(&spec); err != nil {
		return fmt.Errorf("encode bundle: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
