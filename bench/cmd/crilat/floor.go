package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// floor is the OCI runtime alone: runc create + runc start (and, apart,
// runc run --detach) of a busybox
// `sleep 3600` on a bundle like the one crind gives its containers (a
// busybox rootfs, a new mount and PID namespace, the pod's network, UTS and
// IPC namespaces joined by path, a cgroup under the bench's), then runc
// delete --force. What no runtime built on runc can go below.
type floor struct {
	runc    string // the runc binary
	root    string // runc --root, under the bench directory
	bundle  string
	cgroup  string // parent of the containers' cgroupsPath
	samples map[string][]time.Duration
	n       int
	err     error // set once a run failed; the floor is then left alone
}

// floorOptions are the run flags of the floor.
type floorOptions struct {
	dir, nsDir, cgroup, runc, busybox string
}

// tick runs the floor once (a nil floor or one that failed does nothing).
func (f *floor) tick(ctx context.Context, id string, record bool) {
	if f == nil || f.err != nil {
		return
	}
	if err := f.run(ctx, "floor-"+id, record); err != nil {
		f.err = fmt.Errorf("%s: %w", id, err)
	}
}

// writeFloor writes the floor's figures as floor.json into dir.
func writeFloor(f *floor, dir string) error {
	if f == nil || dir == "" || f.n == 0 {
		return nil
	}
	b, err := json.MarshalIndent(map[string]any{"n": f.n, "steps": f.stats()}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode floor: %w", err)
	}
	p := filepath.Join(dir, "floor.json")
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// floor steps, reported like the lifecycle steps.
const (
	floorCreate = "runc create"
	floorStart  = "runc start"
	floorBoth   = "create+start"
	// floorRun is `runc run --detach` on the same bundle: the command
	// crin-shim runs at StartContainer, exec'd here from crilat (compare
	// with StartContainer's runtime_run phase).
	floorRun = "runc run"
	// The floor in place: create and start right after a RunPodSandbox,
	// in the rotation of the round's lifecycles (floor.inPlace).
	floorPlacedCreate = "in place: runc create"
	floorPlacedStart  = "in place: runc start"
	floorPlacedBoth   = "in place: create+start"
	floorPlacedRun    = "in place: runc run"
	floorPrimedBoth   = "in place, primed: create+start"
)

// newFloor writes the bundle into dir: rootfs/bin/busybox (a copy of the
// static busybox at busybox) with sleep linked to it, and a config.json
// from `runc spec`, adjusted. nsDir holds pinned net, ipc and uts
// namespaces to join.
func newFloor(ctx context.Context, runc, busybox, dir, nsDir, cgroup string) (*floor, error) {
	f := &floor{runc: runc, root: filepath.Join(dir, "runc"), bundle: filepath.Join(dir, "bundle"), cgroup: cgroup,
		samples: map[string][]time.Duration{}}
	bin := filepath.Join(f.bundle, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, fmt.Errorf("floor rootfs: %w", err)
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("floor rootfs: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), b, 0o755); err != nil {
		return nil, fmt.Errorf("floor rootfs: %w", err)
	}
	for _, l := range []string{"sleep", "sh"} {
		if err := os.Symlink("busybox", filepath.Join(bin, l)); err != nil {
			return nil, fmt.Errorf("floor rootfs: %w", err)
		}
	}
	if out, err := exec.CommandContext(ctx, runc, "spec", "--bundle", f.bundle).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runc spec: %w: %s", err, strings.TrimSpace(string(out)))
	}
	p := filepath.Join(f.bundle, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read runc spec: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("decode runc spec: %w", err)
	}
	floorSpec(&spec, nsDir)
	if raw, err = json.Marshal(&spec); err != nil {
		return nil, fmt.Errorf("encode floor spec: %w", err)
	}
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		return nil, fmt.Errorf("write floor spec: %w", err)
	}
	return f, nil
}

// floorSpec adjusts runc's default spec to what crind's container of a pod
// that does not share its PID namespace gets: sleep 3600 without a
// terminal, a new mount and PID namespace (and cgroup namespace on cgroup
// v2), the pod's network, UTS and IPC namespaces joined by path.
func floorSpec(spec *specs.Spec, nsDir string) {
	spec.Process.Args = []string{"sleep", "3600"}
	spec.Process.Terminal = false
	spec.Root.Readonly = false
	spec.Hostname = "" // the UTS namespace is joined, not made
	ns := []specs.LinuxNamespace{
		{Type: specs.MountNamespace},
		{Type: specs.PIDNamespace},
		{Type: specs.NetworkNamespace, Path: filepath.Join(nsDir, "net")},
		{Type: specs.UTSNamespace, Path: filepath.Join(nsDir, "uts")},
		{Type: specs.IPCNamespace, Path: filepath.Join(nsDir, "ipc")},
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	spec.Linux.Namespaces = ns
}

// runcCmd runs the floor's runc with args, its output to logf (never a
// pipe: the container inherits runc create's stdio and would hold a pipe
// open), and returns how long it took; on failure the error has what runc
// logged.
func (f *floor) runcCmd(ctx context.Context, logf *os.File, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, f.runc, append([]string{"--root", f.root}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		out, _ := os.ReadFile(logf.Name())
		return d, fmt.Errorf("runc %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return d, nil
}

// logFile is a fresh output file for the runc commands of container id;
// done removes it.
func (f *floor) logFile(id string) (logf *os.File, done func(), err error) {
	p := filepath.Join(filepath.Dir(f.bundle), "runc-"+id+".log")
	if logf, err = os.Create(p); err != nil {
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	return logf, func() { _ = logf.Close(); _ = os.Remove(p) }, nil
}

// createStart times runc create and runc start of container id on the
// bundle, then deletes it.
func (f *floor) createStart(ctx context.Context, id string) (create, start time.Duration, err error) {
	if err := f.useCgroup(id); err != nil {
		return 0, 0, err
	}
	logf, done, err := f.logFile(id)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	if create, err = f.runcCmd(ctx, logf, "create", "--bundle", f.bundle, id); err != nil {
		_, _ = f.runcCmd(ctx, logf, "delete", "--force", id)
		return 0, 0, err
	}
	start, err = f.runcCmd(ctx, logf, "start", id)
	// runc deletes the container's cgroup with it.
	if _, derr := f.runcCmd(ctx, logf, "delete", "--force", id); err == nil && derr != nil {
		err = derr
	}
	return create, start, err
}

// run times one create and start of container id, then deletes it and
// times a runc run of the same bundle; record says whether the times
// count (not in warm-up). It runs right after the round's lifecycles.
func (f *floor) run(ctx context.Context, id string, record bool) error {
	dc, ds, err := f.createStart(ctx, id)
	if err != nil {
		return err
	}
	dr, err := f.runDetached(ctx, id+"-run")
	if err != nil || !record {
		return err
	}
	f.samples[floorCreate] = append(f.samples[floorCreate], dc)
	f.samples[floorStart] = append(f.samples[floorStart], ds)
	f.samples[floorBoth] = append(f.samples[floorBoth], dc+ds)
	f.samples[floorRun] = append(f.samples[floorRun], dr)
	f.n++
	return nil
}

// runDetached times runc run --detach of container id on the bundle,
// then deletes it.
func (f *floor) runDetached(ctx context.Context, id string) (time.Duration, error) {
	if err := f.useCgroup(id); err != nil {
		return 0, err
	}
	logf, done, err := f.logFile(id)
	if err != nil {
		return 0, err
	}
	defer done()
	d, err := f.runcCmd(ctx, logf, "run", "--detach", "--bundle", f.bundle, id)
	if _, derr := f.runcCmd(ctx, logf, "delete", "--force", id); err == nil && derr != nil {
		err = derr
	}
	return d, err
}

// inPlace times the floor where a lifecycle's Create+Start is: right
// after a RunPodSandbox on c (the first target), in the round's rotation
// of lifecycles, then stops and removes that pod. The same runc command
// takes several ms longer when nothing ran just before it than right
// after another runc (bench/README.md, "Where the floor is measured"),
// and the back-to-back floor of run has that advantage; this one is
// measured in the conditions crind's own runc is in. It does so three
// times, each after a pod of its own: runc create + start; runc run
// --detach (what crin-shim runs at StartContainer); and runc create +
// start right after a cgroup attach elsewhere, as crind primes one
// (primeAttach), so the floor has the same head start. The order rotates
// with round so that none always comes first.
// A failure ends the floor as tick's does.
func (f *floor) inPlace(ctx context.Context, c *client, o runOptions, name string, round int, record bool) {
	if f == nil || f.err != nil {
		return
	}
	both := func() error {
		dc, ds, err := f.createStart(ctx, "floor-"+name)
		if err == nil && record {
			f.samples[floorPlacedCreate] = append(f.samples[floorPlacedCreate], dc)
			f.samples[floorPlacedStart] = append(f.samples[floorPlacedStart], ds)
			f.samples[floorPlacedBoth] = append(f.samples[floorPlacedBoth], dc+ds)
		}
		return err
	}
	run := func() error {
		d, err := f.runDetached(ctx, "floor-"+name+"-run")
		if err == nil && record {
			f.samples[floorPlacedRun] = append(f.samples[floorPlacedRun], d)
		}
		return err
	}
	primed := func() error {
		primeAttach()
		dc, ds, err := f.createStart(ctx, "floor-"+name+"-primed")
		if err == nil && record {
			f.samples[floorPrimedBoth] = append(f.samples[floorPrimedBoth], dc+ds)
		}
		return err
	}
	order := []func() error{both, run, primed}
	k := round % len(order)
	order = append(order[k:], order[:k]...)
	for i, fn := range order {
		if err := f.afterPod(ctx, c, o, fmt.Sprintf("%s-%d", name, i), fn); err != nil {
			f.err = fmt.Errorf("%s: %w", name, err)
			return
		}
	}
}

// afterPod runs a pod named name on c, then fn, then stops and removes
// the pod.
func (f *floor) afterPod(ctx context.Context, c *client, o runOptions, name string, fn func() error) error {
	podCfg, err := podConfig(o, name)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	r, err := c.rs.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: o.handler})
	cancel()
	if err != nil {
		return fmt.Errorf("run pod sandbox: %w", err)
	}
	defer removePod(ctx, c, r.GetPodSandboxId())
	return fn()
}

// useCgroup gives the bundle's container a cgroup of its own, named for
// id, as crind's containers get.
func (f *floor) useCgroup(id string) error {
	cfg := filepath.Join(f.bundle, "config.json")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	spec.Linux.CgroupsPath = filepath.Join(f.cgroup, id)
	if raw, err = json.Marshal(&spec); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	return nil
}

// stats summarizes the floor's samples.
func (f *floor) stats() []StepStats {
	var out []StepStats
	for _, s := range []string{floorCreate, floorStart, floorBoth, floorRun, floorPlacedCreate, floorPlacedStart, floorPlacedBoth, floorPlacedRun, floorPrimedBoth} {
		out = append(out, summarize(s, f.samples[s]))
	}
	return out
}

func sortedCopy(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// primeAttach moves crilat into the cgroup it is already in (v1 pids
// hierarchy, else the unified one), which does nothing but take the
// kernel's cgroup attach lock, as crind's attach priming does
// (internal/runtime/oci/attach_prime.go): the runc that follows within an
// RCU grace period attaches its process without waiting for one. It
// returns once the write did, untimed. Failing, it does nothing.
func primeAttach() {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var procs string
		switch parts[1] {
		case "pids":
			procs = filepath.Join("/sys/fs/cgroup/pids", parts[2], "cgroup.procs")
		case "":
			procs = filepath.Join("/sys/fs/cgroup", parts[2], "cgroup.procs")
		default:
			continue
		}
		f, err := os.OpenFile(procs, os.O_WRONLY, 0) // never created
		if err != nil {
			continue
		}
		_, err = f.WriteString(strconv.Itoa(os.Getpid()))
		_ = f.Close()
		if err == nil {
			return
		}
	}
}
