package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/podenv"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// recovery is what crind does on start-up, before it serves
// (docs/recovery.md): it reloads the records, asks the runtimes (and so
// the shims) about every container, records the exits nobody saw, undoes
// what was half-made, and sweeps what no record owns. It holds the spokes
// it works with; what it needs of the hub (its maps, and the steps every
// pod and container goes through) it asks through a recoveryHub.
type recovery struct {
	store    *store.Store
	runtimes map[string]runtime.Runtime
	images   Images
	network  Network
	env      *podenv.Env
	ckpt     *checkpoint.Manager
	// rootDir is Options.RootDir: empty, there are no restore dirs.
	rootDir string
	log     *slog.Logger
	hub     recoveryHub
}

// recoveryHub is what recovery needs of the hub.
type recoveryHub interface {
	// knownID reports whether a pod or container with id is visible;
	// knownPod whether a pod is.
	knownID(id string) bool
	knownPod(id string) bool
	// podHandler is the runtime handler of a visible pod.
	podHandler(id string) (string, bool)
	// destroySandbox disposes of a half-made pod (RemovePodSandbox's
	// last step).
	destroySandbox(ctx context.Context, rec *store.Sandbox) error
	// adoptPod makes a recovered pod visible, and watches its infra if
	// it is ready.
	adoptPod(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig)
	// adoptContainer makes a recovered container visible (its exit
	// done if its record says it exited).
	adoptContainer(rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) *container
	containerRuntime(rec *store.Container) (runtime.Runtime, error)
	recordExit(c *container, st runtime.Status)
	// watchExit starts c's exit monitor.
	watchExit(c *container)
	// resumeEvictions finishes the evictions a previous crind did not.
	resumeEvictions(ctx context.Context)
	// counts is how many pods and containers are visible.
	counts() (pods, containers int)
	// runCleanups starts the loop retrying journaled cleanup steps.
	runCleanups()
}

// newRecovery is the recovery of s.
func newRecovery(s *Service) *recovery {
	return &recovery{
		store:    s.opts.Store,
		runtimes: s.opts.Runtimes,
		images:   s.opts.Images,
		network:  s.opts.Network,
		env:      s.env,
		ckpt:     s.ckpt,
		rootDir:  s.opts.RootDir,
		log:      s.log,
		hub:      recHub{s},
	}
}

// run rebuilds the in-memory state from the store and the live shims
// (docs/recovery.md): pods and containers that were half-made when crind
// died are undone; running containers are watched again; containers that
// exited meanwhile get their real exit status; leftovers nobody owns (runtime
// containers, netns pins, name reservations) are removed; evictions a
// previous crind recorded but did not finish are finished. No NRI event is
// sent here: no adaptation is attached yet. AttachNRI later delivers the
// StopContainer events of exits that no plugin heard of.
func (r *recovery) run(ctx context.Context) error {
	sbs, err := r.store.Sandboxes()
	if err != nil {
		return err
	}
	for _, rec := range sbs {
		if err := r.pod(ctx, rec); err != nil {
			r.log.WarnContext(ctx, "recover pod", "pod_id", rec.ID, "error", err)
		}
	}
	cs, err := r.store.Containers()
	if err != nil {
		return err
	}
	for _, rec := range cs {
		if err := r.container(ctx, rec); err != nil {
			r.log.WarnContext(ctx, "recover container", "container_id", rec.ID, "error", err)
		}
	}
	r.removeOrphans(ctx)
	r.sweep(ctx)
	r.hub.resumeEvictions(ctx)
	pods, ctrs := r.hub.counts()
	r.log.InfoContext(ctx, "state recovered", "pods", pods, "containers", ctrs)
	return nil
}

func (r *recovery) pod(ctx context.Context, rec *store.Sandbox) error {
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := proto.Unmarshal(rec.Config, cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	if rec.State == store.SandboxCreating {
		r.log.InfoContext(ctx, "undoing half-made pod", "pod_id", rec.ID)
		if rec.NetNS != "" {
			if err := r.network.Teardown(ctx, cniPod(rec, cfg)); err != nil {
				return fmt.Errorf("tear down network: %w", err)
			}
			if err := r.env.RemoveNetNS(rec.NetNS); err != nil {
				return err
			}
		}
		return r.hub.destroySandbox(ctx, rec)
	}
	if rec.State == store.SandboxReady && rec.NoInfra {
		// Nothing of it can have died; its namespaces are gone only with
		// their pins (the node rebooted, the state dir was a tmpfs).
		if lost := r.env.LostPin(rec); lost != "" {
			r.log.WarnContext(ctx, "pod namespace pin is gone, pod is not ready", "pod_id", rec.ID, "path", lost)
			rec.State = store.SandboxNotReady
			if err := r.store.PutSandbox(rec); err != nil {
				return err
			}
		}
	} else if rec.State == store.SandboxReady {
		alive := false
		if rt, ok := r.runtimes[rec.RuntimeHandler]; ok {
			st, err := rt.Status(ctx, rec.ID)
			alive = err == nil && st.State == runtime.StateRunning
		}
		if !alive {
			r.log.WarnContext(ctx, "pod infra process is gone, pod is not ready", "pod_id", rec.ID)
			rec.State = store.SandboxNotReady
			if err := r.store.PutSandbox(rec); err != nil {
				return err
			}
		} else if rec.IPCNS == "" && rec.UTSNS == "" && rec.PIDNS == "" {
			// Made by a crind that joined containers through /proc. A
			// failure only keeps new containers out of the pod.
			if err := r.env.PinPodNamespaces(rec, cfg); err != nil {
				r.log.WarnContext(ctx, "pin namespaces of a recovered pod", "pod_id", rec.ID, "error", err)
			} else if err := r.store.PutSandbox(rec); err != nil {
				return err
			}
		}
	}
	r.hub.adoptPod(rec, cfg)
	return nil
}

func (r *recovery) container(ctx context.Context, rec *store.Container) error {
	cfg := &runtimeapi.ContainerConfig{}
	if err := proto.Unmarshal(rec.Config, cfg); err != nil {
		return fmt.Errorf("decode config: %w", err)
	}
	handler, ok := r.hub.podHandler(rec.SandboxID)
	if !ok || rec.State == store.ContainerCreating {
		r.log.InfoContext(ctx, "undoing half-made or orphaned container", "container_id", rec.ID)
		if ok {
			if rt, ok := r.runtimes[handler]; ok {
				if err := rt.Delete(ctx, rec.ID); err != nil {
					return err
				}
			}
		} else {
			for _, rt := range r.runtimes {
				if err := rt.Delete(ctx, rec.ID); err != nil {
					return err
				}
			}
		}
		if err := podenv.RemoveUserNSDir(r.env.UserNSCtrDir(rec.SandboxID, rec.ID)); err != nil {
			return err
		}
		if err := r.images.ReleaseRootfs(ctx, rec.ID); err != nil {
			return err
		}
		if err := r.store.DeleteContainer(rec.ID); err != nil {
			return err
		}
		return r.store.Release(store.KindContainer, rec.Name, rec.ID)
	}
	spec, err := r.spec(ctx, rec)
	if err != nil {
		return err
	}
	c := r.hub.adoptContainer(rec, cfg, spec)
	if rec.State == store.ContainerExited {
		return nil
	}
	if _, err := r.images.Rootfs(ctx, rec.ID); err != nil {
		r.log.WarnContext(ctx, "remount container rootfs", "container_id", rec.ID, "error", err)
	}
	rt, err := r.hub.containerRuntime(rec)
	if err != nil {
		return err
	}
	st, err := rt.Status(ctx, rec.ID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		rec.Reason, rec.Message = "Unknown", "the container's runtime state was lost while crind was down"
		r.hub.recordExit(c, runtime.Status{State: runtime.StateStopped, ExitCode: 255, FinishedAt: time.Now()})
	case err != nil:
		return fmt.Errorf("status: %w", err)
	case st.State == runtime.StateStopped:
		if rec.StartedAt == 0 && !st.StartedAt.IsZero() {
			rec.StartedAt = st.StartedAt.UnixNano()
		}
		r.hub.recordExit(c, st)
	case st.State == runtime.StateRunning:
		if rec.State != store.ContainerRunning {
			// crind died between the runtime start and recording it.
			rec.State, rec.Pid, rec.StartedAt = store.ContainerRunning, st.Pid, st.StartedAt.UnixNano()
			if err := r.store.PutContainer(rec); err != nil {
				return err
			}
		}
		r.hub.watchExit(c)
	}
	return nil
}

// removeOrphans removes what no record owns: runtime containers, netns and
// other namespace pins, and name reservations left by a crash between two
// steps.
func (r *recovery) removeOrphans(ctx context.Context) {
	known := r.hub.knownID
	for name, rt := range r.runtimes {
		ids, err := rt.List(ctx)
		if err != nil {
			r.log.WarnContext(ctx, "list runtime containers", "runtime", name, "error", err)
			continue
		}
		for _, id := range ids {
			if known(id) {
				continue
			}
			r.log.InfoContext(ctx, "removing orphaned runtime container", "runtime", name, "id", id)
			if err := rt.Delete(ctx, id); err != nil {
				r.log.WarnContext(ctx, "remove orphaned runtime container", "id", id, "error", err)
			}
		}
	}
	r.env.SweepPins(ctx, r.hub.knownPod, known)
	for _, k := range []store.Kind{store.KindSandbox, store.KindContainer} {
		res, err := r.store.Reservations(k)
		if err != nil {
			continue
		}
		for name, id := range res {
			if !known(id) {
				_ = r.store.Release(k, name, id)
			}
		}
	}
}

// recoveredSpec decodes the stored spec of container rec (nil when it
// has none or it is corrupt). A record written before specs were stored
// apart carries its own: it is moved to the store's specs, so it is no
// longer rewritten with each record nor kept in memory.
func (r *recovery) spec(ctx context.Context, rec *store.Container) (*specs.Spec, error) {
	if len(rec.Spec) > 0 {
		spec := decodeSpec(rec.Spec)
		if err := r.store.PutContainer(rec); err != nil {
			return nil, err
		}
		rec.Spec = nil
		return spec, nil
	}
	raw, err := r.store.ContainerSpec(rec.ID)
	if err != nil {
		r.log.WarnContext(ctx, "read container spec", "container_id", rec.ID, "error", err)
	}
	return decodeSpec(raw), nil
}
