package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// steps are the CRI calls of one lifecycle, in order.
var steps = []string{
	"RunPodSandbox", "CreateContainer", "StartContainer",
	"StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox",
}

// totalStep names the sum of the steps of one lifecycle.
const totalStep = "total"

// client is a CRI client over one unix socket, as kubelet holds it.
type client struct {
	conn *grpc.ClientConn
	rs   runtimeapi.RuntimeServiceClient
	is   runtimeapi.ImageServiceClient
}

func dial(socket string) (*client, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	return &client{
		conn: conn,
		rs:   runtimeapi.NewRuntimeServiceClient(conn),
		is:   runtimeapi.NewImageServiceClient(conn),
	}, nil
}

// dialed is one -target: its options and a connection to its socket.
type dialed struct {
	o runOptions
	c *client
}

// dialTargets parses each -target spec over common and dials it;
// closeAll closes the connections. On error none is left open.
func dialTargets(common runOptions, specs []string) (ds []dialed, closeAll func(), err error) {
	closeAll = func() {
		for _, d := range ds {
			d.c.conn.Close()
		}
	}
	for _, spec := range specs {
		o, err := parseTarget(common, spec)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		c, err := dial(o.socket)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ds = append(ds, dialed{o: o, c: c})
	}
	return ds, closeAll, nil
}

// runOptions is the configuration of one runtime under test: the flags
// shared by all targets plus the target's own.
type runOptions struct {
	name         string // label in the report
	socket       string
	pid          int    // the daemon, for its memory; 0 skips memory
	shimComm     string // comm of its shims (/proc/PID/comm, 15 bytes at most); several joined by "|"
	handler      string // the CRI runtime handler its pods name ("" for the default)
	pauseImage   string // sandbox image pulled before timing, if it uses one
	image        string
	n, k, warmup int
	stopTimeout  int64
	cgroupParent string
	logDir       string
	match        string
	callTimeout  time.Duration
	metricsURL   string // crind's /metrics, for the phase trace; "" for none
	par          int    // pods started at once in the parallel start; 0 skips it
	parRounds    int
}

// target is one runtime being measured.
type target struct {
	o       runOptions
	c       *client
	res     *Result
	samples map[string][]time.Duration
	err     error // set once the target failed; it is then left alone
}

// targetFlags registers on fs the flags "crilat run" and "crilat stats"
// share: the targets (into specs) and the options common to all of them.
func targetFlags(fs *flag.FlagSet, o *runOptions, specs *[]string) {
	fs.Func("target", "runtime to measure, repeatable: name=NAME,socket=SOCK[,pid=PID][,shim=COMM[|COMM...]][,pause=REF][,handler=NAME][,metrics=URL]",
		func(v string) error { *specs = append(*specs, v); return nil })
	fs.StringVar(&o.image, "image", "", "image of the containers (busybox)")
	fs.StringVar(&o.cgroupParent, "cgroup-parent", "", "cgroup under which each pod gets pod<uid> (cgroupfs); empty leaves it to the runtime")
	fs.StringVar(&o.logDir, "log-dir", "", "directory for the pods' log directories")
	fs.StringVar(&o.match, "shim-match", "", "string the shims' command lines contain (keeps other daemons' shims out)")
	fs.DurationVar(&o.callTimeout, "call-timeout", 2*time.Minute, "timeout of each CRI call")
}

// runFlags are the flags of "crilat run".
type runFlags struct {
	o        runOptions
	specs    []string
	fo       floorOptions
	outDir   string
	baseline string
}

func parseRunFlags(args []string) (*runFlags, error) {
	f := &runFlags{}
	o := &f.o
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	targetFlags(fs, o, &f.specs)
	fs.IntVar(&o.n, "n", 50, "timed lifecycles per target, one after another")
	fs.IntVar(&o.k, "k", 10, "pods kept running for the memory figures")
	fs.IntVar(&o.warmup, "warmup", 2, "untimed lifecycles run first")
	fs.Int64Var(&o.stopTimeout, "stop-timeout", 0, "StopContainer timeout in seconds")
	fs.StringVar(&f.outDir, "out-dir", "", "directory to write NAME.json results to")
	fs.StringVar(&f.baseline, "baseline", "", "target whose latency the others' added latency is computed against")
	fs.IntVar(&o.par, "par", 30, "pods started at once in the parallel start (0 skips it)")
	fs.IntVar(&o.parRounds, "par-rounds", 3, "rounds of the parallel start per target")
	fs.StringVar(&f.fo.dir, "floor-dir", "", "directory for the OCI runtime floor's bundle and runc root (empty skips the floor)")
	fs.StringVar(&f.fo.nsDir, "floor-ns", "", "directory with pinned net, ipc and uts namespaces the floor's containers join")
	fs.StringVar(&f.fo.cgroup, "floor-cgroup", "", "cgroup under which each floor container gets one")
	fs.StringVar(&f.fo.runc, "runc", "runc", "the OCI runtime of the floor")
	fs.StringVar(&f.fo.busybox, "busybox", "/bin/busybox", "static busybox for the floor's rootfs")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if len(f.specs) == 0 || o.image == "" || o.logDir == "" {
		return nil, errors.New("-target, -image and -log-dir are required")
	}
	if o.n < 1 || o.k < 0 || o.warmup < 0 || o.par < 0 || o.parRounds < 0 {
		return nil, fmt.Errorf("-n %d, -k %d, -warmup %d, -par %d, -par-rounds %d: need n >= 1, the others >= 0", o.n, o.k, o.warmup, o.par, o.parRounds)
	}
	return f, nil
}

func runCmd(args []string) error {
	f, err := parseRunFlags(args)
	if err != nil {
		return err
	}
	ds, closeAll, err := dialTargets(f.o, f.specs)
	if err != nil {
		return err
	}
	defer closeAll()
	var targets []*target
	for _, d := range ds {
		targets = append(targets, &target{o: d.o, c: d.c, samples: map[string][]time.Duration{}})
	}
	var fl *floor
	if f.fo.dir != "" {
		if fl, err = newFloor(context.Background(), f.fo.runc, f.fo.busybox, f.fo.dir, f.fo.nsDir, f.fo.cgroup); err != nil {
			return err
		}
	}
	measureAll(context.Background(), targets, fl)
	if err := report(targets, fl, f.outDir, f.baseline); err != nil {
		return err
	}
	// The first target is the one the bench is about; the others are peers
	// whose failure is reported above but does not fail the run.
	return targets[0].err
}

// report prints what measureAll measured and writes it into outDir.
func report(targets []*target, fl *floor, outDir, baseline string) error {
	var done []*Result
	for _, t := range targets {
		if t.err != nil {
			fmt.Fprintf(os.Stderr, "crilat: %s not measured: %v\n", t.o.name, t.err)
			continue
		}
		printResult(os.Stdout, t.res)
		done = append(done, t.res)
		if outDir == "" {
			continue
		}
		b, err := json.MarshalIndent(t.res, "", "  ")
		if err != nil {
			return fmt.Errorf("encode result: %w", err)
		}
		p := filepath.Join(outDir, t.o.name+".json")
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	if len(done) > 0 {
		compare(os.Stdout, done)
		for _, r := range done {
			printPhases(os.Stdout, r.Name, r.Phases)
		}
		printFloorAndParallel(os.Stdout, done, fl)
		printTargets(os.Stdout, done, fl)
	}
	if err := writeFloor(fl, outDir); err != nil {
		return err
	}
	if baseline != "" && len(done) > 0 {
		if err := added(os.Stdout, done, baseline); err != nil {
			fmt.Fprintf(os.Stderr, "crilat: no added latency: %v\n", err)
		}
	}
	for _, t := range targets {
		if t.err != nil {
			fmt.Printf("\n%s not compared: %v\n", t.o.name, t.err)
		}
	}
	return nil
}

// parseTarget fills a copy of common from "name=crind,socket=/s,pid=1,...".
func parseTarget(common runOptions, spec string) (runOptions, error) {
	o := common
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return o, fmt.Errorf("-target %q: %q is not key=value", spec, kv)
		}
		switch k {
		case "name":
			o.name = v
		case "socket":
			o.socket = v
		case "shim":
			o.shimComm = v
		case "pause":
			o.pauseImage = v
		case "handler":
			o.handler = v
		case "metrics":
			o.metricsURL = v
		case "pid":
			pid, err := strconv.Atoi(v)
			if err != nil || pid < 1 {
				return o, fmt.Errorf("-target %q: pid %q is not a process id", spec, v)
			}
			o.pid = pid
		default:
			return o, fmt.Errorf("-target %q: unknown key %q", spec, k)
		}
	}
	if o.name == "" || o.socket == "" {
		return o, fmt.Errorf("-target %q: name and socket are required", spec)
	}
	o.logDir = filepath.Join(common.logDir, o.name)
	return o, nil
}

// measureAll runs the benchmark on every target. The lifecycles interleave
// (lifecycle i of each target, starting with a different target each
// round, the OCI runtime floor fl in place among them if there is one,
// then fl's back-to-back run) so that load from elsewhere on a shared
// machine falls on all of them alike. Memory is then measured one target
// at a time, and last come the rounds of the parallel start, interleaved
// too.
func measureAll(ctx context.Context, targets []*target, fl *floor) {
	for _, t := range targets {
		t.err = prepare(ctx, t)
	}
	o := targets[0].o
	// Slot len(targets) of each round is the floor in place, next to a
	// pod of the first target.
	slots := len(targets)
	if fl != nil {
		slots++
	}
	each := func(round int, f func(t *target) error, floorName string, record bool) {
		for j := range slots {
			k := (round + j) % slots
			if k == len(targets) {
				if targets[0].err == nil {
					fl.inPlace(ctx, targets[0].c, targets[0].o, floorName, round, record)
				}
				continue
			}
			if t := targets[k]; t.err == nil {
				t.err = f(t)
			}
		}
	}
	for i := 0; i < o.warmup; i++ {
		each(i, func(t *target) error {
			if _, err := lifecycle(ctx, t.c, t.o, fmt.Sprintf("warm%d", i)); err != nil {
				return fmt.Errorf("warm-up lifecycle %d: %w", i, err)
			}
			return nil
		}, fmt.Sprintf("placed-warm%d", i), false)
		fl.tick(ctx, fmt.Sprintf("warm%d", i), false)
	}
	before := scrapeAll(ctx, targets)
	for i := 0; i < o.n; i++ {
		each(i, func(t *target) error { return timedLifecycle(ctx, t, i) }, fmt.Sprintf("placed-lc%d", i), true)
		fl.tick(ctx, fmt.Sprintf("lc%d", i), true)
	}
	after := scrapeAll(ctx, targets)
	for i, t := range targets {
		if t.err != nil {
			continue
		}
		for _, s := range append(slices.Clone(steps), totalStep) {
			t.res.Steps = append(t.res.Steps, summarize(s, t.samples[s]))
		}
		if before[i] != nil && after[i] != nil {
			t.res.Phases = phaseDiff(before[i], after[i])
		}
	}
	for _, t := range targets {
		if t.err != nil {
			continue
		}
		mem, err := measureMemory(ctx, t.c, t.o)
		if err != nil {
			t.err = fmt.Errorf("memory: %w", err)
			continue
		}
		t.res.Memory = mem
	}
	// After the memory figures: 30 pods at once grow the daemons' heaps,
	// and the idle figures are meant to be comparable with earlier runs.
	parallelRounds(ctx, targets, o.par, o.parRounds)
}

// timedLifecycle runs lifecycle i on t and records its steps.
func timedLifecycle(ctx context.Context, t *target, i int) error {
	d, err := lifecycle(ctx, t.c, t.o, fmt.Sprintf("lc%d", i))
	if err != nil {
		return fmt.Errorf("lifecycle %d: %w", i, err)
	}
	var total time.Duration
	for j, s := range steps {
		t.samples[s] = append(t.samples[s], d[j])
		total += d[j]
	}
	t.samples[totalStep] = append(t.samples[totalStep], total)
	return nil
}

// scrapeAll reads the metrics of every target that serves them (nil for
// the others, and for one whose scrape failed: it is reported and the
// phase trace left out).
func scrapeAll(ctx context.Context, targets []*target) [][]promSample {
	out := make([][]promSample, len(targets))
	for i, t := range targets {
		if t.err != nil || t.o.metricsURL == "" {
			continue
		}
		s, err := scrape(ctx, t.o.metricsURL)
		if err != nil {
			fmt.Fprintf(os.Stderr, "crilat: %s: no phase trace: %v\n", t.o.name, err)
			continue
		}
		out[i] = s
	}
	return out
}

// prepare waits for the target to be ready and pulls the images.
func prepare(ctx context.Context, t *target) error {
	o := t.o
	t.res = &Result{Name: o.name, Date: time.Now().UTC().Format(time.RFC3339), N: o.n, K: o.k, Warmup: o.warmup}
	v, err := waitReady(ctx, t.c, 60*time.Second)
	if err != nil {
		return err
	}
	t.res.Runtime = v.GetRuntimeName() + " " + v.GetRuntimeVersion()
	pull := func(ref string) error {
		pctx, cancel := context.WithTimeout(ctx, o.callTimeout)
		defer cancel()
		if _, err := t.c.is.PullImage(pctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			return fmt.Errorf("pull %s: %w", ref, err)
		}
		return nil
	}
	start := time.Now()
	if err := pull(o.image); err != nil {
		return err
	}
	t.res.PullMs = ms(time.Since(start))
	if o.pauseImage != "" {
		return pull(o.pauseImage)
	}
	return nil
}

// waitReady waits until the runtime answers Version and reports both the
// runtime and the network ready: a daemon's socket can accept calls before
// its CRI service or its CNI configuration is loaded.
func waitReady(ctx context.Context, c *client, limit time.Duration) (*runtimeapi.VersionResponse, error) {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := c.rs.Version(cctx, &runtimeapi.VersionRequest{})
		if err == nil {
			var st *runtimeapi.StatusResponse
			st, err = c.rs.Status(cctx, &runtimeapi.StatusRequest{})
			if err == nil {
				err = notReady(st)
			}
		}
		cancel()
		if err == nil {
			return v, nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("runtime not ready after %s: %w", limit, last)
}

func notReady(st *runtimeapi.StatusResponse) error {
	var errs []error
	for _, c := range st.GetStatus().GetConditions() {
		if !c.GetStatus() && (c.GetType() == runtimeapi.RuntimeReady || c.GetType() == runtimeapi.NetworkReady) {
			errs = append(errs, fmt.Errorf("%s: %s %s", c.GetType(), c.GetReason(), c.GetMessage()))
		}
	}
	return errors.Join(errs...)
}

// lifecycle runs one pod with one container from start to removal and
// returns the duration of each step, in the order of steps.
func lifecycle(ctx context.Context, c *client, o runOptions, name string) ([]time.Duration, error) {
	d := make([]time.Duration, 0, len(steps))
	var podID, ctrID string
	var cleanup []func()
	defer func() {
		// Only after a failure: a failed step must not leave its pod behind.
		for _, f := range slices.Backward(cleanup) {
			f()
		}
	}()
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
		defer cancel()
		start := time.Now()
		err := f(cctx)
		d = append(d, time.Since(start))
		return err
	}

	podCfg, err := podConfig(o, name)
	if err != nil {
		return nil, err
	}
	if err := call(func(ctx context.Context) error {
		r, err := c.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: o.handler})
		podID = r.GetPodSandboxId()
		return err
	}); err != nil {
		return nil, fmt.Errorf("run pod sandbox: %w", err)
	}
	cleanup = append(cleanup, func() { removePod(ctx, c, podID) })
	if err := call(func(ctx context.Context) error {
		r, err := c.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: podID, Config: containerConfig(o, name), SandboxConfig: podCfg,
		})
		ctrID = r.GetContainerId()
		return err
	}); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	rest := []struct {
		name string
		f    func(context.Context) error
	}{
		{"start container", func(ctx context.Context) error {
			_, err := c.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctrID})
			return err
		}},
		{"stop container", func(ctx context.Context) error {
			_, err := c.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctrID, Timeout: o.stopTimeout})
			return err
		}},
		{"remove container", func(ctx context.Context) error {
			_, err := c.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctrID})
			return err
		}},
		{"stop pod sandbox", func(ctx context.Context) error {
			_, err := c.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
			return err
		}},
		{"remove pod sandbox", func(ctx context.Context) error {
			_, err := c.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
			return err
		}},
	}
	for _, s := range rest {
		if err := call(s.f); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	cleanup = nil
	return d, nil
}

// podConfig is a pod as kubelet would send it for a best-effort pod: its
// own cgroup parent, a log directory, host name and labels.
func podConfig(o runOptions, name string) (*runtimeapi.PodSandboxConfig, error) {
	uid := randHex(8)
	logDir := filepath.Join(o.logDir, name+"_"+uid)
	// kubelet makes the pod's log directory before RunPodSandbox.
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("make pod log dir: %w", err)
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "crinbench"},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{"bench": "crilat"},
		// What kubelet sends for a pod that does not share its process
		// namespace (the zero value, POD, would share it).
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: kubeletNamespaces(),
		}},
	}
	if o.cgroupParent != "" {
		cfg.Linux.CgroupParent = filepath.Join(o.cgroupParent, "pod"+uid)
	}
	return cfg, nil
}

// kubeletNamespaces are the namespace options kubelet gives a pod without
// hostNetwork, hostIPC, hostPID or shareProcessNamespace, and its containers.
func kubeletNamespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

func containerConfig(o runOptions, name string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
		Image:    &runtimeapi.ImageSpec{Image: o.image},
		Command:  []string{"sleep", "3600"},
		LogPath:  "sleep/0.log",
		Labels:   map[string]string{"bench": "crilat", "pod": name},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: kubeletNamespaces(),
		}},
	}
}

// removePod stops and removes a pod and whatever containers it still has,
// ignoring errors: it only runs after something already failed.
func removePod(ctx context.Context, c *client, podID string) {
	if podID == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, _ = c.rs.StopPodSandbox(cctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID})
	_, _ = c.rs.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
