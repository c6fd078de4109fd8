package nri

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/crin-dev/crin/test/poll"
)

// benchPlugin adds one env var per created container after an optional
// pause that stands for a plugin doing real work (reading cgroup files,
// asking a device manager).
type benchPlugin struct {
	key  string
	work time.Duration
}

func (p *benchPlugin) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.work > 0 {
		time.Sleep(p.work)
	}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv(p.key, "1")
	return adj, nil, nil
}

// benchHostEnv turns the test binary into the process that hosts the
// bench plugins (runBenchHost); its value is "socket;count;work".
const benchHostEnv = "CRIN_NRI_BENCH_PLUGINS"

// benchOutOfProcEnv, when set, runs the bench plugins in a process of
// their own, as NRI plugins run in production, instead of inside the test
// process, where they share the Go runtime (GC, scheduler, timers) of the
// adaptation under test.
const benchOutOfProcEnv = "CRIN_NRI_BENCH_PLUGIN_PROCESS"

// startStubs connects n bench plugins to socket.
func startStubs(socket string, n int, work time.Duration) (stop func(), err error) {
	var stubs []stub.Stub
	stop = func() {
		for _, s := range stubs {
			s.Stop()
		}
	}
	for i := range n {
		s, err := stub.New(&benchPlugin{key: fmt.Sprintf("K%d", i), work: work},
			stub.WithSocketPath(socket), stub.WithPluginIdx(fmt.Sprintf("%02d", 10+i)), stub.WithPluginName("bench"))
		if err == nil {
			err = s.Start(context.Background())
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("start bench plugin %d: %w", i, err)
		}
		stubs = append(stubs, s)
	}
	return stop, nil
}

// runBenchPlugins connects n bench plugins to socket and returns a stop
// func. The plugins run in the test process, unless benchOutOfProcEnv is
// set.
func runBenchPlugins(b *testing.B, socket string, n int, work time.Duration) func() {
	b.Helper()
	if n == 0 {
		return func() {}
	}
	if os.Getenv(benchOutOfProcEnv) == "" {
		stop, err := startStubs(socket, n, work)
		if err != nil {
			b.Fatal(err)
		}
		return stop
	}
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), fmt.Sprintf("%s=%s;%d;%s", benchHostEnv, socket, n, work))
	host.Stderr = os.Stderr
	stdin, err := host.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := host.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := host.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() {
		_ = stdin.Close() // the host stops its plugins and exits
		done := make(chan struct{})
		go func() {
			_ = host.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = host.Process.Kill()
			<-done
		}
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		stop()
		b.Fatalf("bench plugin host: %q, %v", line, err)
	}
	return stop
}

// runBenchHost runs the bench plugins of spec (see benchHostEnv), says
// "ready" once they are connected and stops them when stdin closes.
func runBenchHost(spec string) int {
	logrus.SetOutput(io.Discard)
	parts := strings.Split(spec, ";")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want socket;count;work\n", benchHostEnv, spec)
		return 2
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s count %q: %v\n", benchHostEnv, parts[1], err)
		return 2
	}
	work, err := time.ParseDuration(parts[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s work %q: %v\n", benchHostEnv, parts[2], err)
		return 2
	}
	stop, err := startStubs(parts[0], n, work)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	return 0
}

type createFn func(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error

// measure runs b.N creations over callers goroutines, each caller with its
// own pods, and reports latency percentiles and the mean.
func measure(b *testing.B, callers int, create createFn) {
	b.Helper()
	lat := make([]time.Duration, b.N)
	var next sync.Mutex
	i := 0
	cpu0 := processCPU(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				n := i
				i++
				next.Unlock()
				if n >= b.N {
					return
				}
				pod := testPod(fmt.Sprintf("pod-%d-%d", c, n))
				ctr := testCtr(pod.Id, fmt.Sprintf("ctr-%d", n))
				start := time.Now()
				if err := create(context.Background(), pod, ctr); err != nil {
					b.Error(err)
					return
				}
				lat[n] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU(b) - cpu0
	slices.Sort(lat)
	pct := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds())
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	// The mean shows what the median hides when one caller can pass the
	// others (an unfair lock): by Little's law it is callers/throughput.
	b.ReportMetric(float64(sum.Microseconds())/float64(len(lat)), "mean-µs")
	// CPU time of the test process per call: the adaptation under test,
	// the harness and their GC, plus the plugins when they run in-process.
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-µs/op")
}

// processCPU is the user and system time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitPlugins waits until n plugins are connected (crin only; the baseline
// registers plugins before stub.Start returns).
func waitPlugins(b *testing.B, a *Adaptation, n int) {
	poll.Until(b, time.Minute, fmt.Sprintf("%d plugins ready", n), func() (bool, string) {
		ready := 0
		for _, pi := range a.Plugins() {
			if pi.State == StateReady {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d ready", ready)
	})
}

func BenchmarkCreateContainer(b *testing.B) {
	// The stub and the baseline log through logrus; keep results readable.
	logrus.SetOutput(io.Discard)
	for _, work := range []time.Duration{0, time.Millisecond} {
		for _, plugins := range []int{0, 1, 4} {
			for _, callers := range []int{1, 8} {
				name := fmt.Sprintf("work=%s/plugins=%d/callers=%d", work, plugins, callers)
				b.Run("crin/"+name, func(b *testing.B) { benchCrin(b, plugins, callers, work) })
				b.Run("baseline/"+name, func(b *testing.B) { benchBaseline(b, plugins, callers, work) })
			}
		}
	}
}

func benchDir(b *testing.B) string {
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func benchCrin(b *testing.B, plugins, callers int, work time.Duration) {
	dir := benchDir(b)
	cfg := DefaultConfig()
	cfg.PluginPath = ""
	cfg.SocketPath = filepath.Join(dir, "nri.sock")
	cfg.DefaultValidator.Enable = false
	a, err := New(cfg, &fakeEngine{}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	stop := runBenchPlugins(b, cfg.SocketPath, plugins, work)
	waitPlugins(b, a, plugins)
	measure(b, callers, func(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
		// What the hub calls: the owners come with the result.
		_, err := a.CreateContainer(ctx, pod, ctr)
		return err
	})
	stop()
	_ = a.Stop(context.Background())
}

func benchBaseline(b *testing.B, plugins, callers int, work time.Duration) {
	dir := benchDir(b)
	socket := filepath.Join(dir, "nri.sock")
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	updateFn := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("baseline", "v0", syncFn, updateFn,
		adaptation.WithPluginPath(filepath.Join(dir, "none")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "none")),
		adaptation.WithSocketPath(socket))
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	stop := runBenchPlugins(b, socket, plugins, work)
	time.Sleep(50 * time.Millisecond) // let the last sync finish
	measure(b, callers, func(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
		_, err := r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
		return err
	})
	stop()
	r.Stop()
}
