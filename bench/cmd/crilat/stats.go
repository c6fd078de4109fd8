package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// statsRPCs are the calls "crilat stats" times, in the order of each round.
var statsRPCs = []string{"ListContainerStats", "ListPodSandboxStats", "ImageFsInfo", "ContainerStats"}

// Each bench container writes filesPerContainer files of fileKiB into its
// rootfs before it sleeps, so that its writable layer holds at least
// layerBytes.
const (
	filesPerContainer = 4
	fileKiB           = 64
	layerBytes        = filesPerContainer * fileKiB * 1024
)

// StatsResult is what "crilat stats" measured on one runtime.
type StatsResult struct {
	Name       string `json:"name"`
	Runtime    string `json:"runtime"`
	Date       string `json:"date"`
	Pods       int    `json:"pods"`
	Containers int    `json:"containers"` // all of them, not per pod
	Calls      int    `json:"calls"`
	// Order is "interleaved" (rounds shared with the other targets) or
	// "serial" (the target's rounds alone, the others idle).
	Order string `json:"order"`
	// LayersAfterMs is how long after the last container started every
	// container's writable layer was reported at layerBytes or more (-1:
	// not within the deadline); LayersSeen counts the ones that were.
	LayersAfterMs float64 `json:"layers_after_ms"`
	LayersSeen    int     `json:"layers_seen"`
	// Counts are the entries the last call of each list RPC returned.
	Counts map[string]int `json:"counts"`
	RPCs   []StepStats    `json:"rpcs"`
	// DaemonIdle is the daemon with the image pulled and no pod,
	// DaemonLoaded with every container running (after the layers were
	// seen, before the timed calls).
	DaemonIdle   Mem `json:"daemon_idle"`
	DaemonLoaded Mem `json:"daemon_loaded"`
	Shims        int `json:"shims"`
	ShimsTotal   Mem `json:"shims_total"`
	// CPU time the daemon and its shims used during the timed calls
	// (background work included), per round of len(statsRPCs) calls.
	DaemonCPUPerRoundMs float64 `json:"daemon_cpu_per_round_ms"`
	ShimsCPUPerRoundMs  float64 `json:"shims_cpu_per_round_ms"`
	// CPU time the daemon and its shims used per second over an idle
	// window with every container running and no call: the background
	// work (stats sampling, housekeeping).
	DaemonIdleCPUMsPerSec float64 `json:"daemon_idle_cpu_ms_per_s"`
	ShimsIdleCPUMsPerSec  float64 `json:"shims_idle_cpu_ms_per_s"`
}

type statsOptions struct {
	pods, perPod, calls, warmup int
	layerWait                   time.Duration
	settle                      time.Duration
	idle                        time.Duration
	serial                      bool
}

// statsTarget is one runtime under the stats benchmark.
type statsTarget struct {
	o       runOptions
	c       *client
	res     *StatsResult
	pods    []string
	ctrs    []string
	samples map[string][]time.Duration
	err     error
}

func statsCmd(args []string) error {
	var o runOptions
	var so statsOptions
	var specs []string
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	targetFlags(fs, &o, &specs)
	fs.IntVar(&so.pods, "pods", 10, "pods per target")
	fs.IntVar(&so.perPod, "containers", 10, "running containers per pod")
	fs.IntVar(&so.calls, "calls", 200, "timed calls of each RPC per target")
	fs.IntVar(&so.warmup, "warmup", 5, "untimed calls of each RPC first")
	fs.DurationVar(&so.layerWait, "layer-wait", 90*time.Second, "how long to wait for every writable layer to be reported")
	fs.DurationVar(&so.settle, "settle", 3*time.Second, "pause after the containers started before memory is read")
	fs.DurationVar(&so.idle, "idle", 10*time.Second, "window without calls over which the background CPU is read (0: none)")
	fs.BoolVar(&so.serial, "serial", false, "time one target at a time while the others idle, instead of interleaving them")
	outDir := fs.String("out-dir", "", "directory to write stats-NAME.json results to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(specs) == 0 || o.image == "" || o.logDir == "" {
		return errors.New("-target, -image and -log-dir are required")
	}
	if so.pods < 1 || so.perPod < 1 || so.calls < 1 || so.warmup < 0 {
		return fmt.Errorf("-pods %d, -containers %d, -calls %d, -warmup %d: need pods, containers, calls >= 1, warmup >= 0",
			so.pods, so.perPod, so.calls, so.warmup)
	}
	ds, closeAll, err := dialTargets(o, specs)
	if err != nil {
		return err
	}
	defer closeAll()
	var targets []*statsTarget
	for _, d := range ds {
		targets = append(targets, &statsTarget{o: d.o, c: d.c, samples: map[string][]time.Duration{}})
	}
	ctx := context.Background()
	defer func() {
		// The pods go while the daemons still run, also after a failure.
		for _, t := range targets {
			for _, id := range t.pods {
				removePod(context.WithoutCancel(ctx), t.c, id)
			}
		}
	}()
	measureStats(ctx, targets, so)

	return reportStats(targets, *outDir)
}

// reportStats prints the measured targets side by side (and writes each
// one's stats-NAME.json into outDir when set); it returns the first
// target's error, the one the others are compared with.
func reportStats(targets []*statsTarget, outDir string) error {
	var done []*StatsResult
	for _, t := range targets {
		if t.err != nil {
			fmt.Fprintf(os.Stderr, "crilat: %s not measured: %v\n", t.o.name, t.err)
			continue
		}
		done = append(done, t.res)
		if outDir == "" {
			continue
		}
		b, err := json.MarshalIndent(t.res, "", "  ")
		if err != nil {
			return fmt.Errorf("encode result: %w", err)
		}
		p := filepath.Join(outDir, "stats-"+t.o.name+".json")
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	if len(done) > 0 {
		printStats(os.Stdout, done)
	}
	for _, t := range targets {
		if t.err != nil {
			fmt.Printf("\n%s not compared: %v\n", t.o.name, t.err)
		}
	}
	return targets[0].err
}

// measureStats fills every target with pods and containers, one target
// after the other, waits until each reports every writable layer, reads the
// memory, then times the stats RPCs round by round. Interleaved (the
// default), each round makes every RPC once on every target, the target
// order rotating, so load from elsewhere on the machine falls on all alike;
// serial, each target has all its rounds to itself while the others idle.
func measureStats(ctx context.Context, targets []*statsTarget, so statsOptions) {
	for _, t := range targets {
		t.err = prepareStats(ctx, t, so)
	}
	for _, t := range targets {
		if t.err == nil {
			t.err = fillStats(ctx, t, so)
		}
	}
	if !so.serial {
		timeRounds(ctx, targets, so)
		return
	}
	for _, t := range targets {
		timeRounds(ctx, []*statsTarget{t}, so)
	}
}

// timeRounds runs the warm-up and timed rounds on targets, interleaved,
// and fills their results.
func timeRounds(ctx context.Context, targets []*statsTarget, so statsOptions) {
	each := func(round int, f func(t *statsTarget) error) {
		for j := range targets {
			t := targets[(round+j)%len(targets)]
			if t.err == nil {
				t.err = f(t)
			}
		}
	}
	cpu0 := make([]procCPU, len(targets))
	for i := 0; i < so.warmup+so.calls; i++ {
		if i == so.warmup {
			for j, t := range targets {
				cpu0[j] = t.cpu()
			}
		}
		for _, rpc := range statsRPCs {
			each(i, func(t *statsTarget) error {
				d, n, err := statsCall(ctx, t, rpc, i)
				if err != nil {
					return fmt.Errorf("%s call %d: %w", rpc, i, err)
				}
				if i >= so.warmup {
					t.samples[rpc] = append(t.samples[rpc], d)
				}
				if n >= 0 {
					t.res.Counts[rpc] = n
				}
				return nil
			})
		}
	}
	for j, t := range targets {
		if t.err != nil {
			continue
		}
		t.res.Order = "interleaved"
		if so.serial {
			t.res.Order = "serial"
		}
		for _, rpc := range statsRPCs {
			t.res.RPCs = append(t.res.RPCs, summarize(rpc, t.samples[rpc]))
		}
		used := t.cpu().sub(cpu0[j])
		t.res.DaemonCPUPerRoundMs = ms(used.daemon) / float64(so.calls)
		t.res.ShimsCPUPerRoundMs = ms(used.shims) / float64(so.calls)
	}
}

// procCPU is the CPU time (user + system) a daemon and its shims have used.
type procCPU struct{ daemon, shims time.Duration }

func (a procCPU) sub(b procCPU) procCPU { return procCPU{a.daemon - b.daemon, a.shims - b.shims} }

// cpu reads the CPU time of the target's daemon and shims; a process that
// cannot be read counts zero (the figure is only reported).
func (t *statsTarget) cpu() procCPU {
	var c procCPU
	if t.o.pid == 0 {
		return c
	}
	c.daemon, _ = cpuTime(t.o.pid)
	shims, _ := findProcs(t.o.shimComm, t.o.match)
	for _, pid := range shims {
		d, _ := cpuTime(pid)
		c.shims += d
	}
	return c
}

// clockTick is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// Linux for every architecture crin builds for).
const clockTick = 10 * time.Millisecond

// cpuTime is utime + stime of pid from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of pid %d: %w", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU takes utime and stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) may hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStatCPU(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, errors.New("parse /proc stat: no command name")
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc stat: %d fields after the command name", len(f))
	}
	var total time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat: %w", err)
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}

func prepareStats(ctx context.Context, t *statsTarget, so statsOptions) error {
	// prepare waits for readiness and pulls the images; only the runtime's
	// name is kept from its lifecycle Result.
	lt := &target{o: t.o, c: t.c}
	if err := prepare(ctx, lt); err != nil {
		return err
	}
	t.res = &StatsResult{
		Name: t.o.name, Runtime: lt.res.Runtime, Date: time.Now().UTC().Format(time.RFC3339),
		Pods: so.pods, Containers: so.pods * so.perPod, Calls: so.calls, Counts: map[string]int{},
	}
	if t.o.pid == 0 {
		return nil
	}
	time.Sleep(settle)
	m, err := readMem(t.o.pid)
	t.res.DaemonIdle = m
	return err
}

// fillStats starts the pods and their containers, waits until the runtime
// reports each container's writable layer at layerBytes or more, and reads
// the daemon's and its shims' memory.
func fillStats(ctx context.Context, t *statsTarget, so statsOptions) error {
	for p := 0; p < so.pods; p++ {
		name := fmt.Sprintf("stats%d", p)
		cfg, err := podConfig(t.o, name)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, t.o.callTimeout)
		r, err := t.c.rs.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: t.o.handler})
		cancel()
		if err != nil {
			return fmt.Errorf("run pod sandbox %d: %w", p, err)
		}
		t.pods = append(t.pods, r.GetPodSandboxId())
		for c := 0; c < so.perPod; c++ {
			id, err := startWriter(ctx, t, r.GetPodSandboxId(), cfg, c)
			if err != nil {
				return fmt.Errorf("pod %d container %d: %w", p, c, err)
			}
			t.ctrs = append(t.ctrs, id)
		}
	}
	started := time.Now()
	t.res.LayersAfterMs = -1
	for {
		seen, err := layersSeen(ctx, t)
		if err != nil {
			return err
		}
		t.res.LayersSeen = seen
		if seen == len(t.ctrs) {
			t.res.LayersAfterMs = ms(time.Since(started))
			break
		}
		if time.Since(started) > so.layerWait {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if t.o.pid == 0 {
		return nil
	}
	time.Sleep(so.settle)
	var err error
	if t.res.DaemonLoaded, err = readMem(t.o.pid); err != nil {
		return err
	}
	if so.idle > 0 {
		c0, start := t.cpu(), time.Now()
		time.Sleep(so.idle)
		used, secs := t.cpu().sub(c0), time.Since(start).Seconds()
		t.res.DaemonIdleCPUMsPerSec = ms(used.daemon) / secs
		t.res.ShimsIdleCPUMsPerSec = ms(used.shims) / secs
	}
	shims, err := findProcs(t.o.shimComm, t.o.match)
	if err != nil {
		return err
	}
	for _, pid := range shims {
		m, err := readMem(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		t.res.Shims++
		t.res.ShimsTotal.RSS += m.RSS
		t.res.ShimsTotal.PSS += m.PSS
	}
	return nil
}

// startWriter creates and starts container c of a pod: busybox writing
// filesPerContainer files into its rootfs, then sleeping.
func startWriter(ctx context.Context, t *statsTarget, podID string, podCfg *runtimeapi.PodSandboxConfig, c int) (string, error) {
	script := fmt.Sprintf("mkdir -p /bench && for i in %s; do dd if=/dev/zero of=/bench/f$i bs=1024 count=%d 2>/dev/null; done; exec sleep 3600",
		seq(filesPerContainer), fileKiB)
	name := fmt.Sprintf("w%d", c)
	cctx, cancel := context.WithTimeout(ctx, t.o.callTimeout)
	defer cancel()
	r, err := t.c.rs.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: t.o.image},
			Command:  []string{"sh", "-c", script},
			LogPath:  name + "/0.log",
			Labels:   map[string]string{"bench": "crilat"},
			// The pod's (podConfig): a container left at the zero
			// value, pid POD, asks to join a PID namespace the pod
			// does not share, which crind refuses.
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: kubeletNamespaces(),
			}},
		},
		SandboxConfig: podCfg,
	})
	if err != nil {
		return "", fmt.Errorf("create container: %w", err)
	}
	if _, err := t.c.rs.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: r.GetContainerId()}); err != nil {
		return "", fmt.Errorf("start container: %w", err)
	}
	return r.GetContainerId(), nil
}

func seq(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return strings.Join(s, " ")
}

// layersSeen counts the bench containers whose writable layer the runtime
// reports at layerBytes or more.
func layersSeen(ctx context.Context, t *statsTarget) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, t.o.callTimeout)
	defer cancel()
	r, err := t.c.rs.ListContainerStats(cctx, &runtimeapi.ListContainerStatsRequest{})
	if err != nil {
		return 0, fmt.Errorf("list container stats: %w", err)
	}
	ours := make(map[string]bool, len(t.ctrs))
	for _, id := range t.ctrs {
		ours[id] = true
	}
	n := 0
	for _, s := range r.GetStats() {
		if ours[s.GetAttributes().GetId()] && s.GetWritableLayer().GetUsedBytes().GetValue() >= layerBytes {
			n++
		}
	}
	return n, nil
}

// statsCall makes one call of rpc and returns its duration and, for the
// list RPCs, how many entries it returned (else -1). Call i of
// ContainerStats asks for container i modulo the containers.
func statsCall(ctx context.Context, t *statsTarget, rpc string, i int) (time.Duration, int, error) {
	cctx, cancel := context.WithTimeout(ctx, t.o.callTimeout)
	defer cancel()
	n := -1
	start := time.Now()
	var err error
	switch rpc {
	case "ListContainerStats":
		var r *runtimeapi.ListContainerStatsResponse
		r, err = t.c.rs.ListContainerStats(cctx, &runtimeapi.ListContainerStatsRequest{})
		n = len(r.GetStats())
	case "ListPodSandboxStats":
		var r *runtimeapi.ListPodSandboxStatsResponse
		r, err = t.c.rs.ListPodSandboxStats(cctx, &runtimeapi.ListPodSandboxStatsRequest{})
		n = len(r.GetStats())
	case "ImageFsInfo":
		var r *runtimeapi.ImageFsInfoResponse
		r, err = t.c.is.ImageFsInfo(cctx, &runtimeapi.ImageFsInfoRequest{})
		n = len(r.GetImageFilesystems())
	case "ContainerStats":
		_, err = t.c.rs.ContainerStats(cctx, &runtimeapi.ContainerStatsRequest{ContainerId: t.ctrs[i%len(t.ctrs)]})
	default:
		err = fmt.Errorf("unknown rpc %q", rpc)
	}
	return time.Since(start), n, err
}

// printStats prints the results side by side as Markdown tables.
func printStats(w io.Writer, rs []*StatsResult) {
	fmt.Fprintln(w)
	for _, r := range rs {
		layers := fmt.Sprintf("every writable layer reported %.1f s after the last start", r.LayersAfterMs/1000)
		if r.LayersAfterMs < 0 {
			layers = fmt.Sprintf("only %d of %d writable layers reported", r.LayersSeen, r.Containers)
		}
		fmt.Fprintf(w, "- %s: %s, %d pods, %d containers, %d calls per RPC (%s), %s; %s; last list sizes: %s\n",
			r.Name, r.Runtime, r.Pods, r.Containers, r.Calls, r.Order, r.Date, layers, counts(r.Counts))
	}
	fmt.Fprintln(w)
	cols := []string{"RPC (ms)"}
	for _, r := range rs {
		cols = append(cols, r.Name+" mean", r.Name+" p50", r.Name+" p99")
	}
	tableHead(w, cols...)
	for i, s := range rs[0].RPCs {
		row := []string{s.Step}
		for _, r := range rs {
			if i < len(r.RPCs) && r.RPCs[i].Step == s.Step {
				st := r.RPCs[i]
				row = append(row, fmt.Sprintf("%.2f", st.Mean), fmt.Sprintf("%.2f", st.P50), fmt.Sprintf("%.2f", st.P99))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	fmt.Fprintln(w)
	cols = []string{"memory (KiB)"}
	for _, r := range rs {
		cols = append(cols, r.Name+" RSS", r.Name+" PSS")
	}
	tableHead(w, cols...)
	memRow := func(label string, get func(*StatsResult) Mem) {
		row := []string{label}
		for _, r := range rs {
			m := get(r)
			row = append(row, fmt.Sprint(m.RSS), fmt.Sprint(m.PSS))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	memRow("daemon, no pod", func(r *StatsResult) Mem { return r.DaemonIdle })
	memRow(fmt.Sprintf("daemon, %d containers running", rs[0].Containers), func(r *StatsResult) Mem { return r.DaemonLoaded })
	memRow("all shims", func(r *StatsResult) Mem { return r.ShimsTotal })
	row := []string{"shim processes"}
	for _, r := range rs {
		row = append(row, fmt.Sprint(r.Shims), "")
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))

	fmt.Fprintln(w)
	cols = []string{fmt.Sprintf("CPU ms per round (%d calls)", len(statsRPCs))}
	for _, r := range rs {
		cols = append(cols, r.Name)
	}
	tableHead(w, cols...)
	cpuRow := func(label string, get func(*StatsResult) float64) {
		row := []string{label}
		for _, r := range rs {
			row = append(row, fmt.Sprintf("%.2f", get(r)))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	cpuRow("daemon", func(r *StatsResult) float64 { return r.DaemonCPUPerRoundMs })
	cpuRow("shims", func(r *StatsResult) float64 { return r.ShimsCPUPerRoundMs })
	cpuRow("total", func(r *StatsResult) float64 { return r.DaemonCPUPerRoundMs + r.ShimsCPUPerRoundMs })
	cpuRow("idle: daemon, ms per s", func(r *StatsResult) float64 { return r.DaemonIdleCPUMsPerSec })
	cpuRow("idle: shims, ms per s", func(r *StatsResult) float64 { return r.ShimsIdleCPUMsPerSec })
}

func counts(c map[string]int) string {
	var s []string
	for _, rpc := range statsRPCs {
		if n, ok := c[rpc]; ok && rpc != "ContainerStats" {
			s = append(s, fmt.Sprintf("%s %d", rpc, n))
		}
	}
	return strings.Join(s, ", ")
}
