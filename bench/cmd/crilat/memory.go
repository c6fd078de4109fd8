package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// settle is how long the K pods run before memory is read, so that start-up
// garbage has been collected and shims are idle, as on a node.
const settle = 3 * time.Second

// Mem is the memory of one process or the average of several, in KiB.
type Mem struct {
	RSS int64 `json:"rss_kib"`
	PSS int64 `json:"pss_kib"`
}

// Memory holds the memory figures of one runtime.
type Memory struct {
	// DaemonIdle is the daemon with the image pulled and no pod.
	DaemonIdle Mem `json:"daemon_idle"`
	// DaemonLoaded is the daemon with K pods running.
	DaemonLoaded Mem `json:"daemon_loaded"`
	// Shims is how many shim processes serve the K pods.
	Shims int `json:"shims"`
	// ShimAvg is the average of one shim.
	ShimAvg Mem `json:"shim_avg"`
	// ShimPerPod is the sum over all shims divided by K.
	ShimPerPod Mem `json:"shim_per_pod"`
	// Infra is how many infra processes (comm "pause", in the bench's
	// cgroup) the K pods have; InfraPerPod their sum divided by K.
	Infra       int `json:"infra"`
	InfraPerPod Mem `json:"infra_per_pod"`
	// PerPod is (daemon loaded - daemon idle + all shims) / K: what each
	// pod costs the runtime, its own processes (pause, sleep) left out.
	PerPod Mem `json:"per_pod"`
}

func measureMemory(ctx context.Context, c *client, o runOptions) (Memory, error) {
	var m Memory
	if o.pid == 0 || o.k == 0 {
		return m, nil
	}
	time.Sleep(settle)
	idle, err := readMem(o.pid)
	if err != nil {
		return m, err
	}
	m.DaemonIdle = idle
	memHook(ctx, o.pid, "idle")

	var pods []string
	defer func() {
		for _, id := range pods {
			removePod(context.WithoutCancel(ctx), c, id)
		}
	}()
	for i := 0; i < o.k; i++ {
		id, err := startPod(ctx, c, o, fmt.Sprintf("mem%d", i))
		if id != "" {
			pods = append(pods, id)
		}
		if err != nil {
			return m, fmt.Errorf("start pod %d of %d: %w", i+1, o.k, err)
		}
	}
	time.Sleep(settle)
	if m.DaemonLoaded, err = readMem(o.pid); err != nil {
		return m, err
	}
	memHook(ctx, o.pid, "loaded")
	shims, err := findProcs(o.shimComm, o.match)
	if err != nil {
		return m, err
	}
	var sum Mem
	for _, pid := range shims {
		sm, err := readMem(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // exited between the scan and the read
		}
		if err != nil {
			return m, err
		}
		sum.RSS += sm.RSS
		sum.PSS += sm.PSS
		m.Shims++
	}
	if m.Shims > 0 {
		m.ShimAvg = Mem{sum.RSS / int64(m.Shims), sum.PSS / int64(m.Shims)}
	}
	k := int64(o.k)
	m.ShimPerPod = Mem{sum.RSS / k, sum.PSS / k}
	if o.cgroupParent != "" {
		infra, err := findInCgroup("pause", o.cgroupParent)
		if err != nil {
			return m, err
		}
		var isum Mem
		for _, pid := range infra {
			im, err := readMem(pid)
			if err != nil {
				continue // exited between the scan and the read
			}
			isum.RSS += im.RSS
			isum.PSS += im.PSS
			m.Infra++
		}
		m.InfraPerPod = Mem{isum.RSS / k, isum.PSS / k}
	}
	m.PerPod = Mem{
		(m.DaemonLoaded.RSS - m.DaemonIdle.RSS + sum.RSS) / k,
		(m.DaemonLoaded.PSS - m.DaemonIdle.PSS + sum.PSS) / k,
	}
	return m, nil
}

// startPod runs a pod with one running container and returns the pod's id
// (also when a later step failed, so the caller can remove it).
func startPod(ctx context.Context, c *client, o runOptions, name string) (string, error) {
	cfg, err := podConfig(o, name)
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout)
	defer cancel()
	r, err := c.rs.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: o.handler})
	if err != nil {
		return "", fmt.Errorf("run pod sandbox: %w", err)
	}
	podID := r.GetPodSandboxId()
	cr, err := c.rs.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podID, Config: containerConfig(o, name), SandboxConfig: cfg,
	})
	if err != nil {
		return podID, fmt.Errorf("create container: %w", err)
	}
	if _, err := c.rs.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: cr.GetContainerId()}); err != nil {
		return podID, fmt.Errorf("start container: %w", err)
	}
	return podID, nil
}

// readMem reads Rss and Pss of pid from /proc/PID/smaps_rollup.
func readMem(pid int) (Mem, error) {
	f, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return Mem{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return parseRollup(f)
}

// parseRollup takes the Rss: and Pss: lines (in kB) of a smaps_rollup file.
func parseRollup(b []byte) (Mem, error) {
	var m Mem
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch f[0] {
		case "Rss:":
			dst = &m.RSS
		case "Pss:":
			dst = &m.PSS
		default:
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Mem{}, fmt.Errorf("parse smaps_rollup line %q: %w", sc.Text(), err)
		}
		*dst = v
		seen++
	}
	if seen != 2 {
		return Mem{}, errors.New("parse smaps_rollup: no Rss and Pss lines")
	}
	return m, nil
}

// findInCgroup lists the pids whose comm is comm and whose cgroup path
// (any hierarchy) is below parent.
func findInCgroup(comm, parent string) ([]int, error) {
	return findPids([]string{comm}, "cgroup", ":"+parent+"/")
}

// findProcs lists the pids whose comm is comm (or one of several joined by
// "|") and whose command line contains match.
func findProcs(comm, match string) ([]int, error) {
	if comm == "" {
		return nil, nil
	}
	return findPids(strings.Split(comm, "|"), "cmdline", match)
}

// findPids lists the pids whose comm is one of comms and whose
// /proc/<pid>/<file> contains want.
func findPids(comms []string, file, want string) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || !slices.Contains(comms, strings.TrimSpace(string(c))) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil || !bytes.Contains(b, []byte(want)) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// memHook runs $CRILAT_MEM_HOOK, when set, with the daemon's pid in
// $CRILAT_PID and the moment in $CRILAT_MOMENT ("idle", before the K pods
// start, or "loaded", while they run), right after the daemon's memory
// was read: a way to take a heap profile or /proc/PID/smaps then
// (docs/memory.md).
func memHook(ctx context.Context, pid int, moment string) {
	hook := os.Getenv("CRILAT_MEM_HOOK")
	if hook == "" {
		return
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", hook)
	cmd.Env = append(os.Environ(), fmt.Sprintf("CRILAT_PID=%d", pid), "CRILAT_MOMENT="+moment)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "crilat: CRILAT_MEM_HOOK: %v\n", err)
	}
}
