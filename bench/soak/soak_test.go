//go:build soak

package soak

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
)

var (
	podsFlag       = flag.Int("pods", 110, "N: long-running pods (one container each) kept beside the churn")
	lifecyclesFlag = flag.Int("lifecycles", 10000, "L: pod lifecycles to run")
	workersFlag    = flag.Int("workers", 3, "lifecycles run at once")
	windowFlag     = flag.Int("window", 500, "K: print figures every K lifecycles")
	probeFlag      = flag.Duration("probe", 10*time.Second, "each long-running container gets an ExecSync probe this often")
	faultsFlag     = flag.String("faults", "crind,shim,runc,nri,registry,disk", "faults to inject, comma-separated (\"\" or none: no fault)")
	faultEvery     = flag.Duration("fault-every", 30*time.Second, "mean time between two faults (exponentially distributed)")
	csvFlag        = flag.String("csv", "", "also write the figures to this CSV file")
	diskFlag       = flag.Int64("disk-mib", 256, "size of the tmpfs that holds crind's root (the full-disk fault fills it)")
	warmupFlag     = flag.Int("warmup", 1, "windows of warm-up before RSS, goroutines, threads and fds must stay flat")
)

// soak is one run of TestSoak.
type soak struct {
	t   *testing.T
	e   *env
	lat latencies
	rng *rand.Rand

	done   atomic.Int64 // lifecycles finished, whatever their outcome
	failed atomic.Int64 // lifecycles that met an error

	mu        sync.Mutex // guards the fields below
	faults    []faultSpan
	counts    map[string]int // faults injected, by kind
	excused   map[string]int // errors during a fault, by call and code
	problems  []string       // what the run found wrong
	shimKills map[string]bool
	long      []*longPod
	codes     map[int32]int  // exit codes seen and checked true
	retried   map[string]int // calls tried again while crind was down
}

// longPod is one of the N pods kept running.
type longPod struct {
	idx       int
	pod, ctr  string
	code      int32 // its container exits with this on SIGTERM
	pid       int
	startedAt int64
	replaced  int // containers replaced after their shim was killed
}

func (s *soak) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.problems = append(s.problems, time.Now().UTC().Format("15:04:05 ")+msg)
	s.mu.Unlock()
	fmt.Printf("soak: PROBLEM: %s\n", msg)
}

// timed runs one CRI call, recording its latency when it succeeds.
func (s *soak) timed(call string, f func(ctx context.Context) error) error {
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	if err == nil {
		s.lat.add(call, time.Since(start))
	}
	return err
}

// excuse reports whether err, from a call made at t0, falls in a fault's
// window (counted then), or is a problem (recorded).
func (s *soak) check(t0 time.Time, what string, err error) {
	if err == nil {
		return
	}
	if s.faultOverlaps(t0, time.Now()) {
		key := excuseKey(what) + ":" + status.Code(err).String()
		s.mu.Lock()
		s.excused[key]++
		first := s.excused[key] == 1
		s.mu.Unlock()
		if first {
			fmt.Printf("soak: first excused %s: %v\n", key, err)
		}
		return
	}
	s.problem("%s: %v", what, err)
}

// excuseKey is what, without the lifecycle's or pod's number, so that
// excused errors are counted by step.
func excuseKey(what string) string {
	switch {
	case strings.HasPrefix(what, "lifecycle "):
		if _, step, ok := strings.Cut(what, ": "); ok {
			return step
		}
	case strings.HasPrefix(what, "probe of long pod"):
		return "Probe"
	case strings.HasPrefix(what, "replace container of long pod"):
		return "replace container"
	}
	return what
}

func TestSoak(t *testing.T) {
	kinds := parseFaults(t, *faultsFlag)
	o := envOptions{name: "crinsoak"}
	if kinds["disk"] {
		o.diskBytes = *diskFlag << 20
	}
	if kinds["nri"] {
		o.nriPlugin = buildNRIPlugin(t)
	}
	e := newEnv(t, o)
	s := &soak{t: t, e: e, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 23)),
		counts: map[string]int{}, excused: map[string]int{}, shimKills: map[string]bool{}, codes: map[int32]int{}, retried: map[string]int{}}
	fmt.Printf("soak: N=%d pods, L=%d lifecycles, %d at once, K=%d, probe every %s, faults %q every ~%s, %d cores, load %s, dir %s\n",
		*podsFlag, *lifecyclesFlag, *workersFlag, *windowFlag, *probeFlag, *faultsFlag, *faultEvery,
		numCPU(), loadavg(), e.base)

	start := time.Now()
	s.startLong(*podsFlag)
	fmt.Printf("soak: %d long-running pods up in %.1fs\n", *podsFlag, time.Since(start).Seconds())

	var csv *os.File
	if *csvFlag != "" {
		var err error
		if csv, err = os.Create(*csvFlag); err != nil {
			t.Fatal(err)
		}
		defer csv.Close()
		fmt.Fprintln(csv, csvHeader())
	}

	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); s.prober(ctx) }()
	go func() { defer bg.Done(); s.injectFaults(ctx, kinds) }()

	var samples []sample
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range *workersFlag {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Only a whole lifecycle counts towards L: one that met a
			// fault is tried again, as kubelet would, after a back-off
			// (without it a worker would race through L failing ones
			// while the disk is full). L failed ones in all end the run.
			for s.done.Load() < int64(*lifecyclesFlag) && s.failed.Load() < int64(*lifecyclesFlag) {
				if s.lifecycle(int(next.Add(1))) {
					s.done.Add(1)
				} else {
					time.Sleep(time.Second)
				}
			}
		}()
	}
	// Figures every K lifecycles, from this goroutine only.
	first := true
	take := func() {
		smp := s.sample(start)
		samples = append(samples, smp)
		fmt.Println(smp.row(first))
		first = false
		if csv != nil {
			fmt.Fprintln(csv, smp.csv(smp.counts))
		}
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	mark := int64(*windowFlag)
	tick := time.NewTicker(500 * time.Millisecond)
loop:
	for {
		select {
		case <-workersDone:
			break loop
		case <-tick.C:
			s.watchdog()
			if s.done.Load() >= mark {
				take()
				mark += int64(*windowFlag)
			}
		}
	}
	tick.Stop()
	cancel()
	bg.Wait()
	take()
	fmt.Printf("soak: %d lifecycles in %.0fs (and %d that met an error, tried again), faults %s\n", s.done.Load(),
		time.Since(start).Seconds(), s.failed.Load(), s.faultSummary())
	if s.failed.Load() >= int64(*lifecyclesFlag) {
		s.problem("as many lifecycles met an error as the run asked for (%d): crind did not recover from a fault", s.failed.Load())
	}

	s.checkTruth("end of churn")
	s.checkFlat(samples)
	s.teardown()
	s.checkLog()
	s.report()
}

// checkLog reads crind's log (level warn and up): a panic or a fatal
// error is a problem; the kinds of ERROR lines are printed with counts.
func (s *soak) checkLog() {
	raw, err := os.ReadFile(s.e.logFile.Name())
	if err != nil {
		s.problem("read crind's log: %v", err)
		return
	}
	kinds := map[string]int{}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
			s.problem("crind's log: %s", line)
		}
		if !strings.Contains(line, "level=ERROR") {
			continue
		}
		msg := line
		if _, rest, ok := strings.Cut(line, "msg="); ok {
			msg = rest
			if strings.HasPrefix(msg, `"`) {
				if i := strings.Index(msg[1:], `"`); i >= 0 {
					msg = msg[:i+2]
				}
			} else if i := strings.IndexByte(msg, ' '); i >= 0 {
				msg = msg[:i]
			}
		}
		kinds[msg]++
	}
	var out []string
	for k, n := range kinds {
		out = append(out, fmt.Sprintf("%s x%d", k, n))
	}
	slices.Sort(out)
	fmt.Printf("soak: crind logged %d kinds of ERROR: %s\n", len(out), strings.Join(out, "; "))
}

func numCPU() int {
	out, _ := exec.Command("nproc").Output()
	var n int
	fmt.Sscanf(string(out), "%d", &n)
	return n
}

func parseFaults(t *testing.T, s string) map[string]bool {
	out := map[string]bool{}
	known := []string{"crind", "shim", "runc", "nri", "registry", "disk"}
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" || k == "none" {
			continue
		}
		if !slices.Contains(known, k) {
			t.Fatalf("-faults: unknown fault %q (known: %s)", k, strings.Join(known, ","))
		}
		out[k] = true
	}
	return out
}

// buildNRIPlugin builds bench/cmd/nrinop, a no-op plugin on the NRI stub.
func buildNRIPlugin(t *testing.T) string {
	dir, err := os.MkdirTemp("", "crinsoakbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out := filepath.Join(dir, "nrinop")
	cmd := exec.Command("go", "build", "-o", out, "./bench/cmd/nrinop")
	cmd.Dir = harness.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build nrinop: %v\n%s", err, b)
	}
	return out
}

func (s *soak) sample(start time.Time) sample {
	smp := sample{lifecycles: int(s.done.Load()), elapsed: time.Since(start), load: loadavg(),
		lat: map[string][2]time.Duration{}, counts: map[string]int{}}
	s.e.crindCounts(&smp)
	s.e.hostCounts(&smp)
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	if pods, err := s.e.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err == nil {
		smp.pods = len(pods.Items)
	}
	if ctrs, err := s.e.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err == nil {
		smp.ctrs = len(ctrs.Containers)
	}
	for c, ds := range s.lat.take() {
		smp.counts[c] = len(ds)
		smp.lat[c] = [2]time.Duration{quantile(ds, 0.5), quantile(ds, 0.99)}
	}
	smp.faults = s.faultSummary()
	s.mu.Lock()
	var ex []string
	for k, v := range s.excused {
		ex = append(ex, fmt.Sprintf("%s=%d", k, v))
	}
	s.mu.Unlock()
	slices.Sort(ex)
	smp.errs = strings.Join(ex, " ")
	if smp.errs == "" {
		smp.errs = "none"
	}
	return smp
}

// watchdog restarts a crind that died by itself (no fault killed it): a
// finding.
func (s *soak) watchdog() {
	e := s.e
	e.mu.Lock()
	done := e.done
	running := e.cmd != nil
	e.mu.Unlock()
	if !running {
		return
	}
	select {
	case <-done:
	default:
		return
	}
	s.problem("crind exited by itself (see its log); restarting it")
	e.mu.Lock()
	e.cmd = nil
	e.mu.Unlock()
	if err := e.start(); err != nil {
		s.problem("restart crind: %v", err)
	}
}

// checkFlat compares crind's figures after warm-up with the last ones
// taken while the churn ran (the same number of lifecycles in flight; the
// very last sample, taken once they ended, has fewer).
func (s *soak) checkFlat(samples []sample) {
	if len(samples) < *warmupFlag+3 {
		fmt.Printf("soak: too few windows (%d) to judge flatness after %d of warm-up\n", len(samples), *warmupFlag)
		return
	}
	ref, last := samples[*warmupFlag], samples[len(samples)-2]
	for _, f := range []struct {
		name      string
		ref, last float64
		slack     float64 // absolute, for small numbers
	}{
		{"rss MiB", ref.rssMiB, last.rssMiB, 2},
		{"goroutines", ref.goroutines, last.goroutines, float64(4 * *workersFlag)},
		{"threads", ref.threads, last.threads, 2},
		{"open fds", ref.fds, last.fds, float64(2 * *workersFlag)},
	} {
		growth := f.last - f.ref
		verdict := "flat"
		if growth > max(0.10*f.ref, f.slack) {
			verdict = "GROWS"
			s.problem("crind %s grew from %.1f (after warm-up, %d lifecycles) to %.1f (at %d): over 10%%",
				f.name, f.ref, ref.lifecycles, f.last, last.lifecycles)
		}
		fmt.Printf("soak: %-10s %8.1f -> %8.1f  %s\n", f.name, f.ref, f.last, verdict)
	}
}

func (s *soak) report() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var codes []string
	for c, n := range s.codes {
		codes = append(codes, fmt.Sprintf("%d:%d", c, n))
	}
	slices.Sort(codes)
	fmt.Printf("soak: exit codes checked true (code:count): %s\n", strings.Join(codes, " "))
	var retried []string
	for c, n := range s.retried {
		retried = append(retried, fmt.Sprintf("%s=%d", c, n))
	}
	slices.Sort(retried)
	fmt.Printf("soak: calls retried while crind was down: %s\n", strings.Join(retried, " "))
	for _, lp := range s.long {
		if lp.replaced > 0 {
			fmt.Printf("soak: long pod %d: %d containers replaced after their shim was killed\n", lp.idx, lp.replaced)
		}
	}
	if len(s.problems) == 0 {
		fmt.Println("soak: no problem found")
		return
	}
	for _, p := range s.problems {
		s.t.Errorf("%s", p)
	}
}
