package podstats

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

func TestCPURate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type obs struct {
		usage uint64
		at    time.Duration
	}
	for _, tc := range []struct {
		name   string
		seen   []obs
		cur    obs
		want   uint64
		wantOK bool
	}{
		{name: "first sample", cur: obs{5e9, 0}},
		{name: "one core for 10s", seen: []obs{{0, 0}}, cur: obs{10e9, 10 * time.Second}, want: 1e9, wantOK: true},
		{name: "half a core", seen: []obs{{1e9, 0}}, cur: obs{2e9, 2 * time.Second}, want: 5e8, wantOK: true},
		{name: "idle", seen: []obs{{7, 0}}, cur: obs{7, time.Second}, want: 0, wantOK: true},
		{
			// A request right after a sample uses the one before it.
			name: "too close to the last, use the previous",
			seen: []obs{{0, 0}, {10e9, 10 * time.Second}}, cur: obs{10e9 + 1e8, 10*time.Second + 100*time.Millisecond},
			want: uint64(float64(10e9+1e8) / 10.1), wantOK: true,
		},
		{name: "only a close sample", seen: []obs{{0, 0}}, cur: obs{1e6, time.Millisecond}},
		{name: "counter went back (cgroup recreated)", seen: []obs{{5e9, 0}}, cur: obs{1e9, 10 * time.Second}},
		{name: "many cores, large counters", seen: []obs{{1 << 62, 0}}, cur: obs{1<<62 + 64e9, time.Second}, want: 64e9, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cs cpuSeries
			for _, o := range tc.seen {
				cs.observe(cpuSample{o.usage, at(o.at)})
			}
			got, ok := cs.rate(cpuSample{tc.cur.usage, at(tc.cur.at)})
			if ok != tc.wantOK || (ok && absDiff(got, tc.want) > tc.want/1e6+1) {
				t.Errorf("rate = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// A burst of requests must not shrink the span: samples closer than
// minRateGap to the last are not kept.
func TestCPUSeriesKeepsSpan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var cs cpuSeries
	cs.observe(cpuSample{0, t0})
	cs.observe(cpuSample{1e9, t0.Add(time.Second)})
	for i := 1; i <= 10; i++ {
		cs.observe(cpuSample{1e9 + uint64(i), t0.Add(time.Second + time.Duration(i)*time.Millisecond)})
	}
	if cs.prev.at != t0 || cs.last.at != t0.Add(time.Second) {
		t.Errorf("series %+v; want the samples at 0s and 1s kept", cs)
	}
}

func TestParseNetDev(t *testing.T) {
	in := `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0
  eth0: 1234567     890    3    4    0     0          0         0   765432     321    5    6    0     0       0          0
`
	got, err := parseNetDev([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []ifaceCounters{
		{name: "lo", rxBytes: 140, rxPackets: 2, txBytes: 140, txPackets: 2},
		{name: "eth0", rxBytes: 1234567, rxPackets: 890, rxErrors: 3, rxDrop: 4, txBytes: 765432, txPackets: 321, txErrors: 5, txDrop: 6},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(ifaceCounters{})); diff != "" {
		t.Errorf("parseNetDev (-want +got):\n%s", diff)
	}
	if _, err := parseNetDev([]byte("eth0: 1 2 3\n")); err == nil {
		t.Error("a short line parsed without error")
	}
}

func TestWritableLayerFromSampler(t *testing.T) {
	src := &fakeSource{}
	li := newLayerImages()
	col := New(Config{Source: src, Images: li, Period: time.Hour})
	src.addPod("p", "/crin-test-gone/p")
	ctr := src.addContainer("p", "c", store.ContainerCreated, "/crin-test-gone/p/c")
	id := ctr.ID

	get := func() *runtimeapi.FilesystemUsage {
		t.Helper()
		st, err := col.ContainerStats(src.PodContainers("p")[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.WritableLayer
	}
	wl := get()
	if wl.GetUsedBytes().GetValue() != 1<<20 || wl.GetInodesUsed().GetValue() != 3 || wl.GetFsId().GetMountpoint() != "/var" {
		t.Errorf("writable layer %v; want the first measure (1 MiB, 3 inodes, on /var)", wl)
	}
	for range 5 {
		get()
	}
	if n := li.count(id); n != 1 {
		t.Errorf("%d measures after 6 stats calls; want 1 (calls read the cache)", n)
	}
	col.SampleOnce(t.Context()) // created, measured: not again
	if n := li.count(id); n != 1 {
		t.Errorf("a created container measured %d times; its layer is measured once until it runs", n)
	}
	src.setState(id, store.ContainerRunning)
	col.SampleOnce(t.Context())
	if got := get().GetUsedBytes().GetValue(); got != 2<<20 {
		t.Errorf("after a sweep: %d bytes, want the new measure (2 MiB)", got)
	}
	src.remove(id)
	col.SampleOnce(t.Context())
	col.mu.Lock()
	_, kept := col.fs[id]
	col.mu.Unlock()
	if kept {
		t.Error("a removed container's figure is still cached")
	}
}

// Without a measurer, a container's stats carry the time only.
func TestWritableLayerWithoutMeasurer(t *testing.T) {
	src := &fakeSource{}
	col := New(Config{Source: src, Images: noLayers{}})
	ctr := src.addContainer("p", "c", store.ContainerExited, "")
	st, err := col.ContainerStats(ctr)
	if err != nil {
		t.Fatal(err)
	}
	if wl := st.WritableLayer; wl.GetTimestamp() == 0 || wl.GetUsedBytes() != nil || wl.GetFsId() != nil {
		t.Errorf("writable layer %v; want a timestamp and nothing else", wl)
	}
	if st.Cpu != nil || st.Memory != nil {
		t.Errorf("an exited container has CPU %v, memory %v; want none", st.Cpu, st.Memory)
	}
}
