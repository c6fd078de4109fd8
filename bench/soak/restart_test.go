//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/testnet"
)

var (
	rsRunning = flag.Int("rs-running", 110, "restart bench: pods running (one running container each)")
	rsExited  = flag.Int("rs-exited", 1000, "restart bench: exited containers kept, spread over the pods")
	rsRounds  = flag.Int("rs-rounds", 3, "restart bench: SIGKILL and restart each daemon this many times")
	rsPeers   = flag.String("rs-peers", "crind,containerd", "restart bench: daemons to measure")
	ctdFlag   = flag.String("containerd", "", "dir of containerd and containerd-shim-runc-v2 (default ~/.cache/crin/containerd-v2.4.2, see bench/containerd.sh)")
)

// peer is one daemon the restart bench drives over CRI.
type peer struct {
	name   string
	socket string
	launch func() (*exec.Cmd, chan struct{}, error) // starts it, does not wait
	rs     runtimeapi.RuntimeServiceClient
	is     runtimeapi.ImageServiceClient
	conn   *grpc.ClientConn

	mu   sync.Mutex // guards cmd and done
	cmd  *exec.Cmd
	done chan struct{}

	cgroup string // pods' cgroup parent, "" for crind's own

	// What runs, recorded before the kills.
	running map[string]procID // container id -> its init
}

// procID names a process across a daemon restart: a pid is reused, a pid
// and its start time (in clock ticks since boot) are not.
type procID struct {
	pid   int
	start string
}

func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22, starttime
}

func (p *peer) start() error {
	cmd, done, err := p.launch()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

func (p *peer) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

func (p *peer) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// launchProc starts argv with its output to log, in a process group of
// its own, killed if the test binary dies.
func launchProc(log *os.File, env []string, argv ...string) (*exec.Cmd, chan struct{}, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd, done, nil
}

func dial(t *testing.T, p *peer) {
	conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	p.rs = runtimeapi.NewRuntimeServiceClient(conn)
	p.is = runtimeapi.NewImageServiceClient(conn)
}

func waitSocket(p string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("unix", p); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s does not accept after %s", p, d)
}

// crindPeer is the env's crind as a peer.
func crindPeer(t *testing.T, e *env) *peer {
	p := &peer{name: "crind", socket: e.socket}
	p.launch = func() (*exec.Cmd, chan struct{}, error) {
		return launchProc(e.logFile, os.Environ(), filepath.Join(e.bin, "crind"), "--config", e.cfg)
	}
	// The env started one already: take it over.
	e.mu.Lock()
	p.cmd, p.done = e.cmd, e.done
	e.cmd = nil
	e.mu.Unlock()
	dial(t, p)
	return p
}

// containerdPeer starts containerd (bench/containerd.sh's build) with a
// config like bench/lib.sh's for 2.x: own root, state, sockets, shims,
// network namespaces under its state dir, the registry over plain HTTP,
// NRI off, its own bridge network.
func containerdPeer(t *testing.T, e *env) *peer {
	dir := *ctdFlag
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "crin", "containerd-v2.4.2")
	}
	if _, err := os.Stat(filepath.Join(dir, "containerd")); err != nil {
		t.Fatalf("containerd: run `CRIN_CONTAINERD_VERSION=v2.4.2 bench/containerd.sh` first (or pass -containerd): %v", err)
	}
	base := filepath.Join(e.base, "ctd")
	n := testnet.Pick(t, "crinc", base)
	t.Cleanup(func() { n.Remove(t) })
	for _, d := range []string{"net.d", "s", "certs.d/" + e.reg} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "net.d", "10-soak.conflist"), []byte(n.Conflist()), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("server = \"http://%s\"\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", e.reg, e.reg)
	if err := os.WriteFile(filepath.Join(base, "certs.d", e.reg, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(base, "s", "containerd.sock")
	cfg := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %[5]q
[plugins.'io.containerd.transfer.v1.local']
  config_path = %[6]q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "%[7]s/library/pause:soak"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[6]q
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  restrict_oom_score_adj = true
  enable_cdi = false
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = %[8]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[9]q
    max_conf_num = 1
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(base, "root"), filepath.Join(base, "state"), sock, filepath.Join(base, "opt"),
		filepath.Join(base, "shims"), filepath.Join(base, "certs.d"), e.reg, filepath.Join(base, "runc"),
		filepath.Join(base, "net.d"))
	cfgPath := filepath.Join(base, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(base, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	env := append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	p := &peer{name: "containerd", socket: sock, cgroup: e.cgroup + "/ctd"}
	p.launch = func() (*exec.Cmd, chan struct{}, error) {
		return launchProc(log, env, filepath.Join(dir, "containerd"), "--config", cfgPath)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := waitSocket(sock, time.Minute); err != nil {
		t.Fatalf("containerd: %v; log %s", err, log.Name())
	}
	dial(t, p)
	t.Cleanup(func() {
		if p.cmd == nil {
			_ = p.start()
			_ = waitSocket(sock, time.Minute)
		}
		removeAllPods(t, p.rs)
		p.stop()
		p.conn.Close()
		for _, pid := range procsNaming(base) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		// Containers of pods containerd did not remove outlive their
		// shims: kill what is left in its pods' cgroups.
		for _, b := range e.cgroupBases() {
			_ = filepath.WalkDir(filepath.Join(b, "ctd"), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == "cgroup.procs" {
					raw, _ := os.ReadFile(p)
					for _, f := range strings.Fields(string(raw)) {
						var pid int
						if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 1 {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				return nil
			})
		}
		time.Sleep(time.Second)
		// containerd's pod cgroups are ours to remove (kubelet's, on a node).
		for _, b := range e.cgroupBases() {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(b, "ctd"), func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for _, d := range reverse(dirs) {
				_ = os.Remove(d)
			}
		}
	})
	return p
}

func TestRestartScale(t *testing.T) {
	e := newEnv(t, envOptions{name: "crinrs"})
	var peers []*peer
	for _, name := range strings.Split(*rsPeers, ",") {
		switch strings.TrimSpace(name) {
		case "crind":
			peers = append(peers, crindPeer(t, e))
		case "containerd":
			peers = append(peers, containerdPeer(t, e))
		case "":
		default:
			t.Fatalf("-rs-peers: unknown %q (crind, containerd)", name)
		}
	}
	// crind's pods go before the env's clean-up stops it.
	for _, p := range peers {
		if p.name == "crind" {
			t.Cleanup(func() {
				if p.cmd == nil {
					_ = p.start()
					_ = waitSocket(p.socket, time.Minute)
				}
				removeAllPods(t, p.rs)
				p.stop()
				p.conn.Close()
			})
		}
	}
	fmt.Printf("restart: %d running pods and %d exited containers per daemon, %d rounds, %d cores, load %s\n",
		*rsRunning, *rsExited, *rsRounds, numCPU(), loadavg())
	for _, p := range peers {
		t0 := time.Now()
		ctx, cancel := ctxFor(5 * time.Minute)
		if _, err := p.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: e.image}}); err != nil {
			t.Fatalf("%s: pull: %v", p.name, err)
		}
		cancel()
		if err := populate(e, p, *rsRunning, *rsExited); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		fmt.Printf("restart: %s: populated in %.0fs\n", p.name, time.Since(t0).Seconds())
	}
	results := map[string][]restartTimes{}
	for round := range *rsRounds {
		for _, p := range peers {
			rt, err := restartOnce(p, *rsRunning, *rsExited)
			if err != nil {
				t.Errorf("%s round %d: %v", p.name, round+1, err)
				continue
			}
			results[p.name] = append(results[p.name], rt)
			fmt.Printf("restart: %s round %d: socket %.2fs, Status ready %.2fs, ListContainers right %.2fs, all answered %.2fs; %d running containers kept their process, %d exited ones their code\n",
				p.name, round+1, rt.socket.Seconds(), rt.status.Seconds(), rt.list.Seconds(), rt.all().Seconds(), len(p.running), *rsExited)
		}
	}
	fmt.Println("restart: median over rounds (s): daemon, socket, Status, ListContainers, both right")
	for _, p := range peers {
		rs := results[p.name]
		if len(rs) == 0 {
			continue
		}
		med := func(f func(restartTimes) time.Duration) float64 {
			var ds []time.Duration
			for _, r := range rs {
				ds = append(ds, f(r))
			}
			return quantile(ds, 0.5).Seconds()
		}
		fmt.Printf("restart: %-10s %6.2f %6.2f %6.2f %6.2f\n", p.name,
			med(func(r restartTimes) time.Duration { return r.socket }),
			med(func(r restartTimes) time.Duration { return r.status }),
			med(func(r restartTimes) time.Duration { return r.list }),
			med(restartTimes.all))
	}
}

// removeAllPods stops and removes every pod, each with its own timeout
// (harness.RemoveAllPods shares one minute among all, too little for 110
// pods of 10 containers on a busy machine).
func removeAllPods(t *testing.T, rs runtimeapi.RuntimeServiceClient) {
	ctx, cancel := ctxFor(time.Minute)
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		t.Errorf("clean-up: list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		ctx, cancel := ctxFor(2 * time.Minute)
		if _, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("clean-up: stop pod %s: %v", p.Id, err)
		}
		if _, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			t.Errorf("clean-up: remove pod %s: %v", p.Id, err)
		}
		cancel()
	}
}

// populate gives p running pods (a running container each) and exited
// containers spread over them, and records the running ones' processes.
func populate(e *env, p *peer, running, exited int) error {
	p.running = map[string]procID{}
	var mu sync.Mutex
	var firstErr error
	setErr := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range running {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := ctxFor(5 * time.Minute)
			defer cancel()
			pcfg := e.podConfig(fmt.Sprintf("rs-%d", i))
			if p.cgroup != "" {
				pcfg.Linux.CgroupParent = p.cgroup + "/pod" + pcfg.Metadata.Uid
			}
			r, err := p.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pcfg})
			if err != nil {
				setErr(fmt.Errorf("RunPodSandbox: %w", err))
				return
			}
			// This pod's share of the exited containers first, then its
			// running one.
			share := exited / running
			if i < exited%running {
				share++
			}
			for j := range share {
				if _, err := createStart(ctx, p, e.image, r.PodSandboxId, pcfg, fmt.Sprintf("done-%d", j), []string{"sh", "-c", "exit 3"}); err != nil {
					setErr(err)
					return
				}
			}
			id, err := createStart(ctx, p, e.image, r.PodSandboxId, pcfg, "run", []string{"sh", "-c", script(int32(i%9 + 1))})
			if err != nil {
				setErr(err)
				return
			}
			pid, err := initPid(ctx, p, id)
			if err != nil {
				setErr(err)
				return
			}
			mu.Lock()
			p.running[id] = procID{pid: pid, start: procStart(pid)}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	// Every exited one has exited by now, or soon.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		r, x, err := counts(p)
		if err == nil && r == running && x == exited {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after populating: %d running, %d exited (%v), want %d and %d", r, x, err, running, exited)
		}
		time.Sleep(time.Second)
	}
}

func createStart(ctx context.Context, p *peer, image, pod string, pcfg *runtimeapi.PodSandboxConfig, name string, cmd []string) (string, error) {
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd,
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaces()},
		},
	}
	c, err := p.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: pcfg})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s: %w", name, err)
	}
	if _, err := p.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		return "", fmt.Errorf("StartContainer %s: %w", name, err)
	}
	return c.ContainerId, nil
}

func initPid(ctx context.Context, p *peer, id string) (int, error) {
	st, err := p.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
		return 0, fmt.Errorf("container %s: no pid in its verbose status (%v)", short(id), err)
	}
	return info.Pid, nil
}

// counts is how many containers p lists running and exited.
func counts(p *peer) (running, exited int, err error) {
	ctx, cancel := ctxFor(30 * time.Second)
	defer cancel()
	r, err := p.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return 0, 0, err
	}
	for _, c := range r.Containers {
		switch c.State {
		case runtimeapi.ContainerState_CONTAINER_RUNNING:
			running++
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			exited++
		}
	}
	return running, exited, nil
}

type restartTimes struct {
	socket, status, list time.Duration
}

func (r restartTimes) all() time.Duration { return max(r.socket, r.status, r.list) }

// restartOnce SIGKILLs p, starts it again and measures from the start
// until its socket accepts, Status says ready, and ListContainers lists
// the right containers in the right states; then checks no running
// container was restarted: same ids, same processes.
func restartOnce(p *peer, running, exited int) (restartTimes, error) {
	var rt restartTimes
	p.kill()
	t0 := time.Now()
	if err := p.start(); err != nil {
		return rt, err
	}
	if err := waitSocket(p.socket, 5*time.Minute); err != nil {
		return rt, err
	}
	rt.socket = time.Since(t0)
	deadline := t0.Add(10 * time.Minute)
	var last string
	for rt.status == 0 || rt.list == 0 {
		if time.Now().After(deadline) {
			return rt, fmt.Errorf("not right 10m after the restart: %s", last)
		}
		ctx, cancel := ctxFor(30 * time.Second)
		if rt.status == 0 {
			st, err := p.rs.Status(ctx, &runtimeapi.StatusRequest{})
			if err == nil && ready(st) {
				rt.status = time.Since(t0)
			} else {
				last = fmt.Sprintf("Status: %v %v", st, err)
			}
		}
		if rt.list == 0 {
			r, x, err := counts(p)
			if err == nil && r == running && x == exited {
				rt.list = time.Since(t0)
			} else {
				last = fmt.Sprintf("ListContainers: %d running, %d exited, %v", r, x, err)
			}
		}
		cancel()
		if rt.status == 0 || rt.list == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	ctx, cancel := ctxFor(5 * time.Minute)
	defer cancel()
	var bad []string
	for id, was := range p.running {
		pid, err := initPid(ctx, p, id)
		now := procID{pid: pid, start: procStart(pid)}
		if err != nil || now != was {
			bad = append(bad, fmt.Sprintf("%s: was pid %d (start %s), now %d (start %s) %v", short(id), was.pid, was.start, now.pid, now.start, err))
		}
	}
	// The exited ones kept their exit code across the restart.
	all, err := p.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}})
	if err != nil {
		return rt, fmt.Errorf("ListContainers after the restart: %w", err)
	}
	for _, c := range all.Containers {
		st, err := p.rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil || st.Status.ExitCode != 3 {
			bad = append(bad, fmt.Sprintf("exited %s: %v %v, want exit 3", short(c.Id), st.GetStatus().GetExitCode(), err))
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		return rt, errors.New("containers restarted or lost: " + strings.Join(bad[:min(5, len(bad))], "; "))
	}
	return rt, nil
}
