//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestNRIContractSyncUnderLoad connects external plugins while events are
// in progress: each must learn of every pod and container exactly once,
// either in its Synchronize or as a later RunPodSandbox / CreateContainer.
// First deterministically: a plugin connects while another plugin's
// CreateContainer hook for a container is in progress. crind's adaptation lists
// the new plugin, waits for the events already in progress (they keep the
// plugin list they started with) and only then takes the Snapshot, so that
// container is in the new plugin's Synchronize, never in a CreateContainer,
// and its later events (PostCreate, Start, PostStart) reach the plugin.
// Then under load: a plugin connects while four clients create and start
// pods and containers.
func TestNRIContractSyncUnderLoad(t *testing.T) {
	runsOn(t, oci)
	const workers, maxRounds = 4, 6
	n := newNRISetup(t)
	gate := newHookGate(t)
	defer gate.open(t)
	n.install(t, "10", "slow", pluginConfig{Rules: []pluginRule{{Event: "CreateContainer", Container: "inflight", WaitFor: gate.path}}})
	var (
		created atomic.Int32
		stop    atomic.Bool
		wg      sync.WaitGroup
		mu      sync.Mutex
		logDirs []string
	)
	t.Cleanup(func() { // after the daemon's cleanup
		for _, dir := range logDirs {
			_ = os.RemoveAll(dir)
		}
	})
	d := nriDaemon(t, n, contractSlowPlugin("10-slow"))
	waitConfigured(t, d, n, "10-slow")
	ref, _ := busybox(t)
	d.pull(t, ref)

	flightCfg := podConfig("flight")
	logDirs = append(logDirs, flightCfg.LogDirectory)
	contractSyncInFlight(t, d, n, ref, flightCfg, gate)
	if t.Failed() {
		t.FailNow()
	}

	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for i := 0; i < maxRounds && !stop.Load(); i++ {
				podCfg := podConfig(fmt.Sprintf("load-%d-%d", g, i))
				mu.Lock()
				logDirs = append(logDirs, podCfg.LogDirectory)
				mu.Unlock()
				r, err := d.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
				if err != nil {
					t.Errorf("RunPodSandbox %s: %v", podCfg.Metadata.Name, err)
					return
				}
				for _, name := range []string{"a", "b"} {
					c, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
						PodSandboxId: r.PodSandboxId, Config: containerConfig(name, ref, "sleep", "1000"), SandboxConfig: podCfg,
					})
					if err != nil {
						t.Errorf("CreateContainer %s/%s: %v", podCfg.Metadata.Name, name, err)
						return
					}
					if _, err := d.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
						t.Errorf("StartContainer %s/%s: %v", podCfg.Metadata.Name, name, err)
						return
					}
					created.Add(1)
				}
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	// waitCreated waits (at most 3 minutes: the load is judged later)
	// until atLeast containers were made or the load generators ended.
	waitCreated := func(atLeast int32) {
		poll.Within(3*time.Minute, func() (bool, string) {
			select {
			case <-allDone:
				return true, ""
			default:
				return created.Load() >= atLeast, ""
			}
		})
	}

	waitCreated(4)
	ext := n.startExternal(t, "50", "late", pluginConfig{})
	waitCreated(created.Load() + 8)
	stop.Store(true)
	<-allDone
	if t.Failed() {
		t.FailNow()
	}

	ctrs, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	log := n.eventLog("50", "late")
	podSeen := func(evs []pluginEvent, id string) (nSync, nRun int) {
		for _, e := range evs {
			if e.PodID == id && e.Event == "Synchronize" && e.ContainerID == "" {
				nSync++
			}
			if e.PodID == id && e.Event == "RunPodSandbox" {
				nRun++
			}
		}
		return nSync, nRun
	}
	unseen := func(evs []pluginEvent) []string {
		var out []string
		for _, c := range ctrs.Containers {
			if contractCount(evs, "Synchronize", c.Id)+contractCount(evs, "CreateContainer", c.Id) == 0 {
				out = append(out, "container "+c.Id)
			}
		}
		for _, p := range pods.Items {
			if s, r := podSeen(evs, p.Id); s+r == 0 {
				out = append(out, "pod "+p.Id)
			}
		}
		return out
	}
	var evs []pluginEvent
	poll.Within(time.Minute, func() (bool, string) {
		evs = readEvents(t, log)
		return len(unseen(evs)) == 0, ""
	})
	if missing := unseen(evs); len(missing) > 0 {
		t.Errorf("the late plugin never heard of %d of %d containers+pods: %v", len(missing), len(ctrs.Containers)+len(pods.Items), missing)
	}

	known := map[string]bool{}
	var bySync, byEvent int
	for _, c := range ctrs.Containers {
		known[c.Id] = true
		s, cr := contractCount(evs, "Synchronize", c.Id), contractCount(evs, "CreateContainer", c.Id)
		switch {
		case s+cr > 1:
			t.Errorf("container %s (%s) seen %d times in Synchronize and %d times as CreateContainer, want once", c.Id, c.GetMetadata().GetName(), s, cr)
		case s == 1:
			bySync++
		case cr == 1:
			byEvent++
		}
	}
	for _, p := range pods.Items {
		if s, r := podSeen(evs, p.Id); s+r > 1 {
			t.Errorf("pod %s (%s) seen %d times in Synchronize and %d times as RunPodSandbox, want once", p.Id, p.GetMetadata().GetName(), s, r)
		}
	}
	for _, e := range evs {
		if (e.Event == "Synchronize" || e.Event == "CreateContainer") && e.ContainerID != "" && !known[e.ContainerID] {
			t.Errorf("the late plugin was told of container %s, which is not listed: %s", e.ContainerID, e)
		}
	}
	t.Logf("%d pods, %d containers: %d learnt in Synchronize, %d from CreateContainer", len(pods.Items), len(ctrs.Containers), bySync, byEvent)
	if ext.Exited() {
		t.Errorf("the late plugin exited (was it dropped?)")
	}
}

// contractSyncInFlight is the deterministic part of
// TestNRIContractSyncUnderLoad: plugin 40-flight connects while 10-slow's
// CreateContainer hook for container inflight waits for gate.
func contractSyncInFlight(t *testing.T, d *daemon, n *nriSetup, ref string, podCfg *runtimeapi.PodSandboxConfig, gate hookGate) {
	t.Helper()
	pod := d.runPod(t, podCfg)
	before := d.runContainer(t, pod, podCfg, containerConfig("before", ref, "sleep", "1000"))
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId: pod, Config: containerConfig("inflight", ref, "sleep", "1000"), SandboxConfig: podCfg,
		})
		done <- result{r.GetContainerId(), err}
	}()
	hook := findEvent(waitEvents(t, n.eventLog("10", "slow"), 60*time.Second, hasEvent("CreateContainer", "inflight")), "CreateContainer", "inflight")

	// The hook runs until the gate opens.
	n.startExternal(t, "40", "flight", pluginConfig{})
	flight := n.eventLog("40", "flight")
	conf := findEvent(readEvents(t, flight), "Configure", "")
	// While the hook runs, the new plugin waits to be synchronized.
	out, err := crinctlRun(t, d, "--json", "plugins")
	var ps []struct{ Index, Name, State string }
	if err == nil {
		err = json.Unmarshal([]byte(out), &ps)
	}
	state := ""
	for _, p := range ps {
		if p.Index == "40" && p.Name == "flight" {
			state = p.State
		}
	}
	if err != nil || state != "synchronizing" {
		t.Errorf("40-flight while a CreateContainer that started before it connected is in progress: state %q (%v), want synchronizing:\n%s", state, err, out)
	}
	if e := findEvent(readEvents(t, flight), "Synchronize", ""); e != nil {
		t.Errorf("40-flight synchronized while a CreateContainer that started before it connected is in progress: %s", e)
	}
	gate.open(t)

	r := <-done
	if r.err != nil {
		t.Fatalf("CreateContainer inflight: %v", r.err)
	}
	d.startContainer(t, r.id)
	evs := waitEvents(t, flight, 30*time.Second, func(evs []pluginEvent) bool {
		return contractByID(evs, "PostStartContainer", r.id) != nil
	})

	// Synchronize held exactly the pod, before and inflight (still
	// CREATED), and only once the hook was over.
	var synced []string
	for _, e := range evs {
		if e.Event == "Synchronize" {
			synced = append(synced, e.PodID+"/"+e.ContainerID)
		}
	}
	slices.Sort(synced)
	want := []string{pod + "/", pod + "/" + before, pod + "/" + r.id}
	slices.Sort(want)
	if !slices.Equal(synced, want) {
		t.Errorf("40-flight Synchronize lines (pod/container): %v, want %v", synced, want)
	}
	if e := contractFindPod(evs, "RunPodSandbox", "flight"); e != nil {
		t.Errorf("40-flight got %s, want none: the pod was in its Synchronize", e)
	}
	for _, c := range []struct{ name, id string }{{"before", before}, {"inflight", r.id}} {
		if k := contractCount(evs, "CreateContainer", c.id); k != 0 {
			t.Errorf("40-flight got %d CreateContainer for %s, want none: it was in its Synchronize", k, c.name)
		}
	}
	if s := contractByID(evs, "Synchronize", before); s != nil && s.State != "CONTAINER_RUNNING" {
		t.Errorf("40-flight Synchronize of before: %s, want RUNNING", s)
	}
	s := contractByID(evs, "Synchronize", r.id)
	if s == nil {
		return
	}
	if s.State != "CONTAINER_CREATED" {
		t.Errorf("40-flight Synchronize of inflight: %s, want CREATED", s)
	}
	t.Logf("in flight: 40-flight configured %v and synchronized %v after the CreateContainer hook started",
		conf.Time.Sub(hook.Time), s.Time.Sub(hook.Time))
	prev := s.Seq
	for _, ev := range []string{"PostCreateContainer", "StartContainer", "PostStartContainer"} {
		e := contractByID(evs, ev, r.id)
		if k := contractCount(evs, ev, r.id); k != 1 || e.Seq < prev {
			t.Errorf("40-flight: %d %s for inflight (first %v), want exactly one after #%d", k, ev, e, prev)
			continue
		}
		prev = e.Seq
	}
}
