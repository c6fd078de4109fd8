//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
)

// script is what every container runs: sh as PID 1 of its own PID namespace, which
// exits with the code given when it gets SIGTERM (a StopContainer) or
// SIGUSR1 (sent from an exec: the container exits by itself).
// The exit on SIGUSR1 waits half a second, so that the exec that sent it
// ends first (it would die with the container's PID namespace). PID 1
// ignores a signal it has no handler for: /tmp/ready says the traps are
// set, and the probe waits for it, as a readiness probe would.
func script(code int32) string {
	return fmt.Sprintf(`trap "exit %d" TERM; trap "sleep 0.5; exit %d" USR1; touch /tmp/ready; sleep 100000 & wait`, code, code)
}

// notReady is the probe's exit code while /tmp/ready is missing.
const notReady = 99

func namespaces() *runtimeapi.NamespaceOption {
	// What kubelet sends for a pod that shares nothing with the host and
	// no PID namespace among its containers.
	return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD,
		Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD}
}

func (e *env) podConfig(name string) *runtimeapi.PodSandboxConfig {
	uid := harness.RandHex(8)
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "soak"},
		Hostname:     name,
		LogDirectory: filepath.Join(e.base, "logs", uid),
		Labels:       map[string]string{"soak": name},
		// No cgroup parent of the pod's own: crind puts it below its
		// cri.cgroup_parent, so every cgroup left there is crind's leak
		// (kubelet makes and removes the pod-level cgroup it passes).
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: namespaces()},
		},
	}
}

func (e *env) containerConfig(name string, code int32) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: e.image},
		Command:  []string{"sh", "-c", script(code)},
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaces()},
		},
	}
}

// runContainer creates and starts a container in pod and returns its id.
func (s *soak) runContainer(pod string, pcfg *runtimeapi.PodSandboxConfig, name string, code int32) (string, error) {
	var id string
	err := s.timed("CreateContainer", func(ctx context.Context) error {
		r, err := s.e.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod,
			Config: s.e.containerConfig(name, code), SandboxConfig: pcfg})
		if err == nil {
			id = r.ContainerId
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("CreateContainer: %w", err)
	}
	err = s.timed("StartContainer", func(ctx context.Context) error {
		_, err := s.e.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})
		return err
	})
	if err != nil {
		return id, fmt.Errorf("StartContainer: %w", err)
	}
	return id, nil
}

// probe runs an ExecSync that prints a token and exits with a random
// code, and checks both; extra is appended to the command (a kill).
func (s *soak) probe(call, ctr, extra string) error {
	code := int32(s.randN(4))
	token := harness.RandHex(4)
	var resp *runtimeapi.ExecSyncResponse
	for tries := 0; ; tries++ {
		err := s.timed(call, func(ctx context.Context) error {
			var err error
			resp, err = s.e.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctr, Timeout: 20,
				Cmd: []string{"sh", "-c", fmt.Sprintf("[ -e /tmp/ready ] || exit %d; echo %s;%s exit %d", notReady, token, extra, code)}})
			return err
		})
		if err != nil {
			return fmt.Errorf("ExecSync: %w", err)
		}
		if resp.ExitCode != notReady {
			break
		}
		if tries == 200 {
			s.problem("container %s: its traps not set 10s after it started", short(ctr))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if resp.ExitCode != code || string(resp.Stdout) != token+"\n" {
		s.problem("ExecSync in %s: exit %d stdout %q, want exit %d stdout %q (stderr %q)",
			short(ctr), resp.ExitCode, resp.Stdout, code, token+"\n", resp.Stderr)
	}
	return nil
}

func (s *soak) randN(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}

func short(id string) string { return id[:min(12, len(id))] }

// lifecycle runs lifecycle n: a pod, a container that exits with a random
// code either when stopped or by itself, a probe, removal; then checks
// the exit code crind reports. It reports whether the lifecycle went
// through whole.
func (s *soak) lifecycle(n int) bool {
	t0 := time.Now()
	name := fmt.Sprintf("lc-%d", n)
	code := int32(s.randN(10))
	selfExit := n%4 == 0
	pcfg := s.e.podConfig(name)
	var pod, ctr string
	step := "RunPodSandbox"
	err := s.timed("RunPodSandbox", func(ctx context.Context) error {
		r, err := s.e.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
		if err == nil {
			pod = r.PodSandboxId
		}
		return err
	})
	if err == nil {
		ctr, err = s.runContainer(pod, pcfg, "c", code)
		step = "Create/StartContainer"
	}
	if err == nil {
		extra := ""
		if selfExit {
			extra = " kill -USR1 1;"
		}
		err = s.probe("ExecSync", ctr, extra)
		step = "ExecSync"
	}
	if err == nil && selfExit {
		err = s.waitExited(ctr, 30*time.Second)
		step = "wait for exit"
	}
	if err == nil && !selfExit {
		err = s.retrying("StopContainer", func(ctx context.Context) error {
			_, err := s.e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr, Timeout: 10})
			return err
		})
		step = "StopContainer"
	}
	if err == nil {
		s.checkExit(ctr, pod, code, t0)
		err = s.retrying("RemoveContainer", func(ctx context.Context) error {
			_, err := s.e.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr})
			return err
		})
		step = "RemoveContainer"
	}
	if err == nil {
		err = s.retrying("StopPodSandbox", func(ctx context.Context) error {
			_, err := s.e.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
			return err
		})
		step = "StopPodSandbox"
	}
	if err == nil {
		err = s.retrying("RemovePodSandbox", func(ctx context.Context) error {
			_, err := s.e.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
			return err
		})
		step = "RemovePodSandbox"
	}
	if err != nil {
		s.failed.Add(1)
		s.checkPod(t0, pod, fmt.Sprintf("lifecycle %d: %s", n, step), err)
		s.cleanupPod(name)
	}
	_ = os.RemoveAll(pcfg.LogDirectory)
	return err == nil
}

// retrying is timed for a call that is safe to repeat (stop, remove,
// status): while crind is down (Unavailable) it is tried again, as kubelet
// would, for up to 3 minutes; so a container that exits while crind is
// down still has its exit code checked.
func (s *soak) retrying(call string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := s.timed(call, f)
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		s.mu.Lock()
		s.retried[call]++
		s.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// checkPod is check, also excusing errors in a pod whose shim a fault
// killed.
func (s *soak) checkPod(t0 time.Time, pod, what string, err error) {
	s.mu.Lock()
	killed := s.shimKills[pod]
	s.mu.Unlock()
	if killed {
		s.mu.Lock()
		s.excused["shim-killed-pod"]++
		s.mu.Unlock()
		return
	}
	s.check(t0, what, err)
}

func (s *soak) waitExited(ctr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var st *runtimeapi.ContainerStatusResponse
		err := s.retrying("ContainerStatus", func(ctx context.Context) error {
			var err error
			st, err = s.e.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
			return err
		})
		if err != nil {
			return fmt.Errorf("ContainerStatus: %w", err)
		}
		if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s still %s %s after it was told to exit", short(ctr), st.Status.State, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkExit checks the exited container's code and reason: its own code,
// or 255 and ShimDied when a fault killed its pod's shim
// (docs/recovery.md, "Shim death").
func (s *soak) checkExit(ctr, pod string, code int32, t0 time.Time) {
	var st *runtimeapi.ContainerStatusResponse
	err := s.retrying("ContainerStatus", func(ctx context.Context) error {
		var err error
		st, err = s.e.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
		return err
	})
	if err != nil {
		s.check(t0, "ContainerStatus after exit", err)
		return
	}
	c := st.Status
	s.mu.Lock()
	killed := s.shimKills[pod]
	s.mu.Unlock()
	wantReason := "Completed"
	if code != 0 {
		wantReason = "Error"
	}
	switch {
	case c.State != runtimeapi.ContainerState_CONTAINER_EXITED:
		s.problem("container %s: state %s after its exit, want EXITED", short(ctr), c.State)
	case c.ExitCode == code && c.Reason == wantReason:
		s.mu.Lock()
		s.codes[code]++
		s.mu.Unlock()
	case killed && c.ExitCode == 255 && c.Reason == "ShimDied":
		s.mu.Lock()
		s.codes[255]++
		s.mu.Unlock()
	default:
		s.problem("container %s (pod %s): exit %d reason %q message %q, want %d %q (shim killed: %v)",
			short(ctr), short(pod), c.ExitCode, c.Reason, c.Message, code, wantReason, killed)
	}
}

// cleanupPod removes every pod labelled name, as kubelet would retry,
// until crind lets it (it may be down or its disk full for a while).
func (s *soak) cleanupPod(name string) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := s.removeLabelled(name)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.problem("pod %s not removed after 5m: %v", name, err)
			return
		}
		time.Sleep(time.Second)
	}
}

func (s *soak) removeLabelled(name string) error {
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	rs := s.e.rs
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"soak": name}}})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return err
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			return err
		}
	}
	return nil
}

// --- the long-running pods ---------------------------------------------------

func (s *soak) startLong(n int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	s.long = make([]*longPod, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			lp := &longPod{idx: i, code: int32(i%9 + 1)}
			name := fmt.Sprintf("long-%d", i)
			pcfg := s.e.podConfig(name)
			err := s.timed("RunPodSandbox", func(ctx context.Context) error {
				r, err := s.e.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
				if err == nil {
					lp.pod = r.PodSandboxId
				}
				return err
			})
			if err == nil {
				lp.ctr, err = s.runContainer(lp.pod, pcfg, "long", lp.code)
			}
			if err != nil {
				s.t.Errorf("long-running pod %d: %v", i, err)
				return
			}
			lp.pid, lp.startedAt, _ = s.pidOf(lp.ctr)
			s.mu.Lock()
			s.long[i] = lp
			s.mu.Unlock()
		}()
	}
	wg.Wait()
	if s.t.Failed() {
		s.t.FailNow()
	}
}

// pidOf is the container's init pid (from the verbose status) and start
// time.
func (s *soak) pidOf(ctr string) (int, int64, error) {
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	st, err := s.e.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr, Verbose: true})
	if err != nil {
		return 0, 0, err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	_ = json.Unmarshal([]byte(st.Info["info"]), &info)
	return info.Pid, st.Status.StartedAt, nil
}

func (s *soak) longPods() []*longPod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*longPod
	for _, lp := range s.long {
		if lp != nil {
			cp := *lp
			out = append(out, &cp)
		}
	}
	return out
}

// prober probes every long-running container once per -probe period, as
// kubelet's exec probes would, and replaces one whose shim a fault killed.
func (s *soak) prober(ctx context.Context) {
	tick := time.NewTicker(*probeFlag)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, lp := range s.longPods() {
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				s.probeLong(lp)
			}()
		}
		wg.Wait()
	}
}

func (s *soak) probeLong(lp *longPod) {
	if lp.ctr == "" {
		s.replaceLong(lp)
		return
	}
	t0 := time.Now()
	err := s.probe("Probe", lp.ctr, "")
	if err == nil {
		return
	}
	ctx, cancel := ctxFor(30 * time.Second)
	st, serr := s.e.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: lp.ctr})
	cancel()
	if serr != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		s.checkPod(t0, lp.pod, fmt.Sprintf("probe of long pod %d", lp.idx), err)
		return
	}
	s.mu.Lock()
	killed := s.shimKills[lp.pod]
	s.mu.Unlock()
	c := st.Status
	if !killed || c.ExitCode != 255 || c.Reason != "ShimDied" {
		s.problem("long pod %d: container %s exited: code %d reason %q message %q (shim killed: %v)",
			lp.idx, short(lp.ctr), c.ExitCode, c.Reason, c.Message, killed)
	} else {
		s.mu.Lock()
		s.codes[255]++
		s.mu.Unlock()
	}
	s.replaceLong(lp)
}

// replaceLong does what kubelet does for a dead container: remove it,
// start the next one in the same pod.
func (s *soak) replaceLong(lp *longPod) {
	t0 := time.Now()
	var err error
	if lp.ctr != "" {
		// Safe to repeat: a removal whose answer a crind kill lost
		// answers OK the second time.
		err = s.retrying("RemoveContainer", func(ctx context.Context) error {
			_, err := s.e.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: lp.ctr})
			return err
		})
		if err == nil {
			// Gone: if the new one cannot be made now (a full disk), the
			// next probe tries again rather than probe a removed one.
			s.mu.Lock()
			s.long[lp.idx].ctr = ""
			s.mu.Unlock()
		}
	}
	var ctr string
	if err == nil {
		ctx, cancel := ctxFor(30 * time.Second)
		ps, perr := s.e.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: lp.pod})
		cancel()
		err = perr
		if err == nil {
			pcfg := s.e.podConfig(fmt.Sprintf("long-%d", lp.idx))
			pcfg.Metadata = ps.Status.Metadata
			ctr, err = s.runContainer(lp.pod, pcfg, "long", lp.code)
		}
	}
	if err != nil {
		s.check(t0, fmt.Sprintf("replace container of long pod %d", lp.idx), err)
		return
	}
	pid, started, _ := s.pidOf(ctr)
	s.mu.Lock()
	cur := s.long[lp.idx]
	cur.ctr, cur.pid, cur.startedAt = ctr, pid, started
	cur.replaced++
	delete(s.shimKills, lp.pod)
	s.mu.Unlock()
}

// checkTruth checks what crind says of the long-running pods: ready,
// their containers running, the same processes as before (same pid and
// start time: nothing restarted). Shim-killed ones are left to the prober.
func (s *soak) checkTruth(when string) {
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	ctrs, err := s.e.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		s.problem("%s: ListContainers: %v", when, err)
		return
	}
	byID := map[string]*runtimeapi.Container{}
	for _, c := range ctrs.Containers {
		byID[c.Id] = c
	}
	bad := 0
	for _, lp := range s.longPods() {
		s.mu.Lock()
		killed := s.shimKills[lp.pod]
		s.mu.Unlock()
		if killed {
			continue
		}
		c := byID[lp.ctr]
		if c == nil {
			// Replaced since the copy was taken?
			s.mu.Lock()
			now := s.long[lp.idx].ctr
			s.mu.Unlock()
			if now != lp.ctr {
				continue
			}
			s.problem("%s: long pod %d: container %s missing from ListContainers", when, lp.idx, short(lp.ctr))
			bad++
			continue
		}
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			s.problem("%s: long pod %d: container %s is %s, want RUNNING", when, lp.idx, short(lp.ctr), c.State)
			bad++
			continue
		}
		pid, started, err := s.pidOf(lp.ctr)
		if err != nil || pid != lp.pid || started != lp.startedAt {
			s.problem("%s: long pod %d: container %s pid %d started %d, was pid %d started %d (%v)",
				when, lp.idx, short(lp.ctr), pid, started, lp.pid, lp.startedAt, err)
			bad++
		}
	}
	if bad == 0 {
		fmt.Printf("soak: %s: every long-running container RUNNING, same pid and start time\n", when)
	}
}
