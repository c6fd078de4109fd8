package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ParallelStats is the parallel start: P pods started at once, each
// RunPodSandbox, CreateContainer and StartContainer one after another but
// all pods concurrently, timed from the first call until every container
// reports CONTAINER_RUNNING in ContainerStatus; R rounds.
type ParallelStats struct {
	Pods     int       `json:"pods"`
	RoundsMs []float64 `json:"rounds_ms"` // wall time of each round, in the order run
	MedianMs float64   `json:"median_ms"`
	// Error is why the rounds stopped early, if they did: the target's
	// other figures stand.
	Error string `json:"error,omitempty"`
}

// parallelRounds runs rounds parallel starts of pods pods on every target
// that has not failed, interleaved like the lifecycles. A target whose
// parallel start fails keeps its other figures.
func parallelRounds(ctx context.Context, targets []*target, pods, rounds int) {
	if pods < 1 {
		return
	}
	for _, t := range targets {
		if t.err == nil {
			t.res.Parallel = &ParallelStats{Pods: pods}
		}
	}
	for r := range rounds {
		for j := range targets {
			t := targets[(r+j)%len(targets)]
			p := t.res.Parallel
			if t.err != nil || p == nil || p.Error != "" {
				continue
			}
			d, err := parallelStart(ctx, t.c, t.o, pods, fmt.Sprintf("par%d", r))
			if err != nil {
				p.Error = fmt.Sprintf("round %d: %v", r, err)
				continue
			}
			p.RoundsMs = append(p.RoundsMs, ms(d))
			p.MedianMs = medianMs(p.RoundsMs)
		}
	}
}

// statusPoll is how often a started container's status is asked for
// until it reports running.
const statusPoll = 5 * time.Millisecond

// parallelStart starts pods pods at once and returns the wall time until
// all their containers run; the pods are removed before it returns.
func parallelStart(ctx context.Context, c *client, o runOptions, pods int, round string) (time.Duration, error) {
	cfgs := make([]*runtimeapi.PodSandboxConfig, pods)
	for i := range cfgs {
		var err error
		if cfgs[i], err = podConfig(o, fmt.Sprintf("%s-%d", round, i)); err != nil {
			return 0, err
		}
	}
	podIDs := make([]string, pods)
	done := make([]time.Duration, pods)
	errs := make([]error, pods)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfgs {
		wg.Go(func() {
			done[i], errs[i] = startOne(ctx, c, o, cfgs[i], &podIDs[i], start)
		})
	}
	wg.Wait()
	wall := slices.Max(done)
	markRound(start, wall)
	// Removed whatever happened, concurrently, untimed.
	for _, id := range podIDs {
		wg.Go(func() { removePod(ctx, c, id) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("pod %d of %d: %w", i, pods, err)
		}
	}
	return wall, nil
}

// startOne runs one pod with one busybox sleep container and waits until
// the container reports running; it returns the time since start then.
func startOne(ctx context.Context, c *client, o runOptions, podCfg *runtimeapi.PodSandboxConfig, podID *string, start time.Time) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	defer cancel()
	r, err := c.rs.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg, RuntimeHandler: o.handler})
	if err != nil {
		return 0, fmt.Errorf("run pod sandbox: %w", err)
	}
	*podID = r.GetPodSandboxId()
	cr, err := c.rs.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: *podID, Config: containerConfig(o, podCfg.GetMetadata().GetName()), SandboxConfig: podCfg,
	})
	if err != nil {
		return 0, fmt.Errorf("create container: %w", err)
	}
	id := cr.GetContainerId()
	if _, err := c.rs.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return 0, fmt.Errorf("start container: %w", err)
	}
	for {
		st, err := c.rs.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return 0, fmt.Errorf("container status: %w", err)
		}
		switch st.GetStatus().GetState() {
		case runtimeapi.ContainerState_CONTAINER_RUNNING:
			return time.Since(start), nil
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			return 0, fmt.Errorf("container %s exited: %s", id, st.GetStatus().GetReason())
		}
		select {
		case <-cctx.Done():
			return 0, fmt.Errorf("container %s not running: %w", id, cctx.Err())
		case <-time.After(statusPoll):
		}
	}
}

// medianMs is the nearest-rank median of v, 0 for none.
func medianMs(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return p50(v)
}

// markRound appends the timed span of a round, "<start> <end>" in
// CLOCK_MONOTONIC nanoseconds, to the file $CRILAT_ROUND_MARKS names, if
// set: the clock `perf record -k CLOCK_MONOTONIC` stamps its samples with,
// so a system-wide profile can be cut down to the parallel rounds
// (bench/README.md, "Profiling the parallel start").
func markRound(start time.Time, wall time.Duration) {
	f := os.Getenv("CRILAT_ROUND_MARKS")
	if f == "" {
		return
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		fmt.Fprintf(os.Stderr, "crilat: CRILAT_ROUND_MARKS: %v\n", err)
		return
	}
	begin := ts.Nano() - int64(time.Since(start))
	line := fmt.Sprintf("%d %d\n", begin, begin+int64(wall))
	fd, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fd.WriteString(line)
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "crilat: CRILAT_ROUND_MARKS: %v\n", err)
	}
}
