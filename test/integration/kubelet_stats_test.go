//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// withStatsPeriod restarts d with [cri] stats_period set, so the stats
// sampler runs often enough for a test.
func withStatsPeriod(t *testing.T, d *daemon, period string) {
	t.Helper()
	d.stop()
	b, err := os.ReadFile(d.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "[cri]\n", fmt.Sprintf("[cri]\nstats_period = %q\n", period), 1)
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
}

// eventLog collects a GetContainerEvents stream.
type eventLog struct {
	mu   sync.Mutex
	evs  []*runtimeapi.ContainerEventResponse
	err  error
	done chan struct{}
}

func watchEvents(t *testing.T, d *daemon) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := d.rs.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatalf("GetContainerEvents: %v", err)
	}
	l := &eventLog{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			ev, err := st.Recv()
			l.mu.Lock()
			if err != nil {
				l.err = err
				l.mu.Unlock()
				return
			}
			l.evs = append(l.evs, ev)
			l.mu.Unlock()
		}
	}()
	return l
}

// of lists the event types seen for id, in order.
func (l *eventLog) of(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		if ev.ContainerId == id {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(ev.ContainerEventType.String(), "CONTAINER_"), "_EVENT"))
		}
	}
	return out
}

// TestKubeletStats checks the figures kubelet's CRI stats provider and
// metrics collector read, and the events its evented PLEG reads.
func TestKubeletStats(t *testing.T) {
	// Not on gvisor: the metrics' process counts come from the
	// container's own cgroup, which runsc leaves empty (the container's
	// processes live in the sandbox process): "spin processes >= 1 false"
	// in the node lane's VM, 2026-11-28.
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	withStatsPeriod(t, d, "1s")
	ref, _ := busybox(t)
	d.pull(t, ref)
	events := watchEvents(t, d)

	podCfg := podConfig("stats")
	pod := d.runPod(t, podCfg)
	writer := d.runContainer(t, pod, podCfg, containerConfig("writer", ref, "sh", "-c", "dd if=/dev/zero of=/fill bs=1M count=5 && sync && echo done && sleep 600"))
	spin := d.runContainer(t, pod, podCfg, containerConfig("spin", ref, "sh", "-c", "while :; do :; done"))

	stats := func(t *testing.T, id string) *runtimeapi.ContainerStats {
		t.Helper()
		r, err := d.rs.ContainerStats(ctxT(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStats: %v", err)
		}
		return r.Stats
	}

	t.Run("writable layer", func(t *testing.T) {
		ctx := ctxT(t)
		poll.Until(t, time.Minute, "writable layer of a container that wrote 5 MiB", func() (bool, string) {
			wl := stats(t, writer).WritableLayer
			return wl.GetUsedBytes().GetValue() >= 5<<20 && wl.GetInodesUsed().GetValue() > 0 && wl.GetFsId().GetMountpoint() != "",
				fmt.Sprintf("%v", wl)
		})
		// More written later shows without a call walking the layer: the
		// sampler measures it again.
		d.execOut(t, writer, "dd", "if=/dev/zero", "of=/more", "bs=1M", "count=3")
		poll.Until(t, time.Minute, "writable layer after 3 MiB more", func() (bool, string) {
			wl := stats(t, writer).WritableLayer
			return wl.GetUsedBytes().GetValue() >= 8<<20, fmt.Sprintf("%v", wl)
		})
		list, err := d.rs.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: pod}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Stats {
			if s.Attributes.Id == writer && s.WritableLayer.GetUsedBytes().GetValue() < 8<<20 {
				t.Errorf("ListContainerStats writable layer %v, want >= 8 MiB as ContainerStats says", s.WritableLayer)
			}
		}
		fs, err := d.is.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fs.ImageFilesystems) != 1 || len(fs.ContainerFilesystems) != 1 ||
			fs.ImageFilesystems[0].GetUsedBytes().GetValue() < 5<<20 || fs.ImageFilesystems[0].GetFsId().GetMountpoint() == "" {
			t.Errorf("ImageFsInfo %v; want one image and one container filesystem holding the 5 MiB written", fs)
		}
	})

	t.Run("cpu", func(t *testing.T) {
		ctx := ctxT(t)
		poll.Until(t, time.Minute, "usage_nano_cores of a busy loop", func() (bool, string) {
			c := stats(t, spin).Cpu
			return c.GetUsageNanoCores().GetValue() > 1e8, fmt.Sprintf("%v", c)
		})
		poll.Until(t, time.Minute, "pod usage_nano_cores", func() (bool, string) {
			r, err := d.rs.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
			if err != nil {
				return false, err.Error()
			}
			c := r.Stats.GetLinux().GetCpu()
			return c.GetUsageNanoCores().GetValue() > 1e8, fmt.Sprintf("%v", c)
		})
	})

	t.Run("network", func(t *testing.T) {
		ctx := ctxT(t)
		ps, err := d.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil {
			t.Fatal(err)
		}
		ip := ps.Status.GetNetwork().GetIp()
		rx := func() (uint64, *runtimeapi.NetworkUsage) {
			r, err := d.rs.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: pod})
			if err != nil {
				t.Fatal(err)
			}
			n := r.Stats.GetLinux().GetNetwork()
			return n.GetDefaultInterface().GetRxBytes().GetValue(), n
		}
		before, n := rx()
		if n.GetDefaultInterface().GetName() != "eth0" || !slices.ContainsFunc(n.GetInterfaces(), func(i *runtimeapi.NetworkInterfaceUsage) bool { return i.Name == "eth0" }) {
			t.Errorf("pod network %v; want eth0 as the default interface and in the list", n)
		}
		// 2 MiB of UDP at a closed port: every datagram is received by
		// the pod's eth0 (and answered, at most, with an ICMP error).
		c, err := net.Dial("udp", net.JoinHostPort(ip, "9"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 1024)
		for range 2048 {
			_, _ = c.Write(buf)
		}
		poll.Until(t, time.Minute, "pod rx bytes after 2 MiB sent to it", func() (bool, string) {
			now, _ := rx()
			return now >= before+1<<20, fmt.Sprintf("%d bytes (%d before)", now, before)
		})
	})

	t.Run("metrics", func(t *testing.T) {
		ctx := ctxT(t)
		descs, err := d.rs.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string][]string{}
		for _, ds := range descs.Descriptors {
			keys[ds.Name] = ds.LabelKeys
		}
		for _, n := range []string{"container_cpu_usage_seconds_total", "container_memory_usage_bytes", "container_memory_working_set_bytes",
			"container_memory_rss", "container_network_receive_bytes_total", "container_network_transmit_bytes_total",
			"container_fs_usage_bytes", "container_fs_inodes_free", "container_processes", "container_threads"} {
			if _, ok := keys[n]; !ok {
				t.Errorf("no metric descriptor %s", n)
			}
		}
		r, err := d.rs.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var all []*runtimeapi.Metric
		for _, pm := range r.PodMetrics {
			all = append(all, pm.Metrics...)
			for _, cm := range pm.ContainerMetrics {
				all = append(all, cm.Metrics...)
			}
		}
		var fsUsage, rxEth0, procs bool
		for _, m := range all {
			k, ok := keys[m.Name]
			if !ok || len(k) != len(m.LabelValues) {
				t.Errorf("metric %s labels %q; descriptor keys %q", m.Name, m.LabelValues, k)
				continue
			}
			label := func(key string) string { return m.LabelValues[slices.Index(k, key)] }
			switch {
			case m.Name == "container_fs_usage_bytes" && label("id") == writer:
				fsUsage = m.Value.GetValue() >= 5<<20
			case m.Name == "container_network_receive_bytes_total" && label("interface") == "eth0":
				rxEth0 = m.Value.GetValue() > 0
			case m.Name == "container_processes" && label("id") == spin:
				procs = m.Value.GetValue() >= 1
			}
		}
		if !fsUsage || !rxEth0 || !procs {
			t.Errorf("metrics: writer fs usage >= 5 MiB %v, pod eth0 rx > 0 %v, spin processes >= 1 %v", fsUsage, rxEth0, procs)
		}
		st, err := d.rs.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var pods int
		for {
			resp, err := st.Recv()
			if err != nil {
				break
			}
			pods += len(resp.PodSandboxMetrics)
		}
		if pods != len(r.PodMetrics) {
			t.Errorf("StreamPodSandboxMetrics sent %d pods, ListPodSandboxMetrics %d", pods, len(r.PodMetrics))
		}
	})

	t.Run("events", func(t *testing.T) {
		ctx := ctxT(t)
		id := d.runContainer(t, pod, podCfg, containerConfig("ev", ref, "sleep", "600"))
		if _, err := d.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
		want := []string{"CREATED", "STARTED", "STOPPED", "DELETED"}
		poll.Until(t, time.Minute, "container events", func() (bool, string) {
			got := events.of(id)
			return slices.Equal(got, want), fmt.Sprintf("%q", got)
		})
		if _, err := d.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, time.Minute, "pod events", func() (bool, string) {
			got := events.of(pod)
			return slices.Equal(got, want), fmt.Sprintf("%q", got)
		})
		events.mu.Lock()
		for _, ev := range events.evs {
			if ev.PodSandboxStatus.GetMetadata().GetUid() != podCfg.Metadata.Uid {
				t.Errorf("event %s of %s: pod status %v; kubelet drops events without the pod's metadata", ev.ContainerEventType, ev.ContainerId, ev.PodSandboxStatus)
			}
		}
		if events.err != nil {
			t.Errorf("event stream ended: %v", events.err)
		}
		events.mu.Unlock()
	})
}
