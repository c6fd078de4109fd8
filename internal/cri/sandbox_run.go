package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/podenv"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/trace"
)

// RunPodSandbox creates and starts a pod: reserve its name, write its files,
// make and pin its namespaces, run CNI ADD, start its infra process if it
// needs one (podNeedsInfra), relay NRI RunPodSandbox, and only then make
// it visible. Any failure (a plugin's included) undoes every step.
func (s *Service) RunPodSandbox(ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (_ *runtimeapi.RunPodSandboxResponse, retErr error) {
	cfg := r.GetConfig()
	if err := s.validateRunRequest(cfg); err != nil {
		return nil, err
	}
	handler, rt, err := s.runtimeFor(r.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	userns, err := oci.PodUserNS(cfg)
	if err != nil {
		return nil, err
	}
	if userns != nil {
		if err := s.env.UserNSUsable(handler, s.features[handler]); err != nil {
			return nil, err
		}
	}
	md := cfg.Metadata
	id := newID()
	name := fmt.Sprintf("%s_%s_%s_%d", md.Name, md.Namespace, md.Uid, md.Attempt)
	log := s.log.With("pod_id", id, "pod", md.Namespace+"/"+md.Name)

	var undo rollback
	defer func() {
		if retErr != nil {
			undo.run(ctx, log)
		}
	}()
	// Registered first so that it runs last: plugins hear of the removal
	// of a pod whose RunPodSandbox they saw after its infra container,
	// network and netns are gone, as in a normal removal.
	var seen podHookUndo
	undo.add("nri remove pod sandbox", seen.removePod)
	rec, err := s.newSandboxRecord(id, name, handler, cfg)
	if err != nil {
		return nil, err
	}
	rec.NoInfra = !podNeedsInfra(rt, cfg)
	// The name and the record, in state creating, go in first and in one
	// write: a crind killed at any later point finds them on restart and
	// undoes the rest.
	if err := s.opts.Store.ReserveSandbox(rec); err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil, fmt.Errorf("metadata: %w", err)
		}
		return nil, err
	}
	undo.add("release name", func(context.Context) error { return s.opts.Store.Release(store.KindSandbox, name, id) })
	undo.add("delete record", func(context.Context) error { return s.opts.Store.DeleteSandbox(id) })
	trace.Mark(ctx, "store_reserve")
	undo.add("remove pod dir", func(context.Context) error { return s.env.RemovePodDir(rec) })
	if err := s.env.PreparePodDir(rec, cfg); err != nil {
		return nil, err
	}
	trace.Mark(ctx, "pod_dir")
	waitShim := s.startPodShim(ctx, rt, rec, &undo)
	spec, err := s.setUpPodNamespaces(ctx, rt, rec, cfg, userns, &undo)
	if err != nil {
		return nil, err
	}
	trace.Mark(ctx, "cni_add_infra")
	waitShim()
	trace.Mark(ctx, "pod_shim")
	showPins(spec, rec)
	linux := oci.NRIPodLinux(spec)
	if linux != nil {
		if rec.NRILinux, err = proto.Marshal(linux); err != nil {
			return nil, fmt.Errorf("encode nri pod linux: %w", err)
		}
	}
	view := nriPod(rec, cfg, linux)
	if err := s.runPodHook(ctx, view, &undo, &seen); err != nil {
		return nil, err
	}
	trace.Mark(ctx, "nri_run")
	rec.State = store.SandboxReady
	if err := s.opts.Store.PutSandbox(rec); err != nil {
		return nil, err
	}
	trace.Mark(ctx, "store_ready")
	if err := ctx.Err(); err != nil {
		// kubelet gave up: it will retry, so do not leave a pod it never saw.
		return nil, fmt.Errorf("run pod sandbox: %w", err)
	}
	s.publishSandbox(rec, cfg, view)
	log.InfoContext(ctx, "pod sandbox ready", "runtime", handler, "ips", rec.IPs, "pid", rec.Pid, "infra", !rec.NoInfra)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// setUpPodNamespaces makes the pod's namespaces and network and returns
// the infra spec. A pod without an infra process (rec.NoInfra) gets its
// namespaces from crind: pinned, then CNI ADD; the spec is built first
// (it validates the pod's hostname and sysctls) and only run by a pod
// with an infra process, whose namespaces are pinned once it started.
// Every step registers its undo.
func (s *Service) setUpPodNamespaces(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig, userns *oci.UserNS, undo *rollback) (*specs.Spec, error) {
	if rec.NoInfra {
		spec, err := s.sandboxSpec(rec, cfg, userns)
		if err != nil {
			return nil, err
		}
		// With a user namespace, setUpPodNetwork makes them, owned by
		// it. Unpinned by the pod dir's undo.
		if userns == nil {
			if err := s.env.NewPodNamespaces(rec, cfg); err != nil {
				return nil, err
			}
		}
		trace.Mark(ctx, "namespaces")
		return spec, s.setUpPodNetwork(ctx, rec, cfg, userns, undo)
	}
	if err := s.setUpPodNetwork(ctx, rec, cfg, userns, undo); err != nil {
		return nil, err
	}
	spec, err := s.sandboxSpec(rec, cfg, userns)
	if err != nil {
		return nil, err
	}
	if userns != nil {
		id := rec.ID
		dir := s.env.UserNSPodDir(id)
		undo.add("remove id-mapped mounts", func(ctx context.Context) error { return s.env.ReleaseUserNSDir(ctx, id, dir) })
		if err := s.env.IDMapSpec(spec, userns, id, dir, podenv.IDMapOptions{}); err != nil {
			return nil, err
		}
	}
	if err := s.startInfra(ctx, rt, rec, spec, undo); err != nil {
		return nil, err
	}
	return spec, s.env.PinPodNamespaces(rec, cfg)
}

// newSandboxRecord is the record of a new pod id, in state creating.
func (s *Service) newSandboxRecord(id, name, handler string, cfg *runtimeapi.PodSandboxConfig) (*store.Sandbox, error) {
	parent := s.env.Layout().PodParent(cfg.GetLinux().GetCgroupParent(), id)
	rec := &store.Sandbox{
		ID:             id,
		Name:           name,
		State:          store.SandboxCreating,
		RuntimeHandler: handler,
		CgroupParent:   parent,
		PodDir:         s.env.PodDir(id),
		CreatedAt:      time.Now().UnixNano(),
	}
	var err error
	if rec.Config, err = proto.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("encode pod config: %w", err)
	}
	if !podHostNetwork(cfg) {
		rec.NetNS = s.env.NetNSPath(id)
	}
	return rec, nil
}

// podsWithoutInfra is the optional capability of a runtime backend whose
// containers join a pod's namespaces by path, so that a pod need not have
// an infra container there (the oci backend; containerd shims expect one).
type podsWithoutInfra interface {
	PodsWithoutInfra() bool
}

// podNeedsInfra reports whether a pod of cfg on rt runs an infra process
// (docs/state-machines.md): when it shares one PID namespace, whose PID 1
// must be there to reap, and when rt's backend wants a sandbox container.
// Other pods' namespaces are files crind makes itself.
func podNeedsInfra(rt runtime.Runtime, cfg *runtimeapi.PodSandboxConfig) bool {
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_POD {
		return true
	}
	c, ok := rt.(podsWithoutInfra)
	return !ok || !c.PodsWithoutInfra()
}

// podHostNetwork reports whether pod cfg uses the node's network.
func podHostNetwork(cfg *runtimeapi.PodSandboxConfig) bool {
	return cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
}

// setUpPodNetwork pins the pod's network namespace (owned by its user
// namespace, if it has one) and runs CNI ADD in it, unless the pod uses
// the node's network.
func (s *Service) setUpPodNetwork(ctx context.Context, rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig, userns *oci.UserNS, undo *rollback) error {
	if rec.NetNS == "" {
		return nil
	}
	id := rec.ID
	if userns != nil {
		// The pod's network namespace is owned by its user
		// namespace, so its sysctls and sysfs work inside.
		if err := s.env.NewPodUserNS(rec, userns, cfg.GetHostname()); err != nil {
			return err
		}
		undo.add("remove user namespace", func(context.Context) error { return s.env.RemovePodUserNS(id) })
	} else if err := s.env.NewNetNS(id); err != nil {
		return err
	}
	undo.add("remove netns", func(context.Context) error { return s.env.RemoveNetNS(rec.NetNS) })
	trace.Mark(ctx, "netns")
	pod := cniPod(rec, cfg)
	res, err := s.opts.Network.Setup(ctx, pod)
	if err != nil {
		return fmt.Errorf("set up pod network: %w", err)
	}
	undo.add("cni del", func(ctx context.Context) error { return s.opts.Network.Teardown(ctx, pod) })
	rec.IPs = res.IPs
	return nil
}

// sandboxSpec builds the infra container's spec for the pod's runtime,
// joining the pod's user namespace if it has one.
func (s *Service) sandboxSpec(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig, userns *oci.UserNS) (*specs.Spec, error) {
	id, handler := rec.ID, rec.RuntimeHandler
	usernsPin := ""
	if userns != nil {
		usernsPin = s.env.UserNSPin(id)
	}
	spec, err := oci.SandboxSpec(oci.SandboxOptions{
		UserNSPath:         usernsPin,
		ID:                 id,
		Config:             cfg,
		Rootfs:             s.opts.PauseRoot,
		PauseBinary:        s.opts.PauseBinary,
		NetNSPath:          rec.NetNS,
		CgroupsPath:        cgroup.Container(rec.CgroupParent, id),
		OOMScoreAdjMin:     s.opts.OOMScoreAdjMin,
		SeccompProfileRoot: s.opts.SeccompProfileRoot,
	})
	if err != nil {
		return nil, err
	}
	if err := oci.Fit(spec, s.features[handler]); err != nil {
		return nil, fmt.Errorf("runtime %s: %w", handler, err)
	}
	return spec, nil
}

// startInfra creates and starts the pod's infra container in rt and
// records its pid.
func (s *Service) startInfra(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, spec *specs.Spec, undo *rollback) error {
	id, handler := rec.ID, rec.RuntimeHandler
	undo.add("remove pod cgroup", func(context.Context) error { return s.env.RemovePodCgroup(s.ctx, rec) })
	if err := rt.Create(ctx, runtime.CreateRequest{ID: id, PodID: id, Spec: spec}); err != nil {
		return fmt.Errorf("create infra container: %w", err)
	}
	undo.add("delete infra", func(ctx context.Context) error { return s.cleanups.DeleteFromRuntime(ctx, handler, id) })
	pid, err := rt.Start(ctx, id)
	if err != nil {
		return fmt.Errorf("start infra container: %w", err)
	}
	rec.Pid = pid
	return nil
}

// publishSandbox makes the ready pod rec visible, watches its infra
// process and tells event subscribers.
func (s *Service) publishSandbox(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig, view *api.PodSandbox) {
	sb := &sandbox{rec: rec, config: cfg}
	sb.nri.store(view)
	s.mu.Lock()
	delete(s.pendingPods, rec.ID)
	s.sandboxes[rec.ID] = sb
	s.mu.Unlock()
	s.watchSandbox(sb)
	s.emitSandbox(eventCreated, sb)
	s.emitSandbox(eventStarted, sb)
}

// runPodHook relays NRI RunPodSandbox for a pod that is set up but not
// visible yet. From the call on, the pod is in Snapshot (plugins that
// connect meanwhile see it), and seen makes the rollback send
// RemovePodSandbox: some plugins may have seen the pod even when a later
// one failed. A pod that never came into being gets only that one
// teardown event, no StopPodSandbox (docs/state-machines.md).
func (s *Service) runPodHook(ctx context.Context, view *api.PodSandbox, undo *rollback, seen *podHookUndo) error {
	h := s.hooks()
	if h == nil {
		return nil
	}
	id := view.GetId()
	addPending(s, s.pendingPods, id, view, undo)
	seen.h, seen.view = h, view
	if err := h.RunPodSandbox(ctx, proto.Clone(view).(*api.PodSandbox)); err != nil {
		return fmt.Errorf("nri run pod sandbox %s: %w", id, err)
	}
	return nil
}

// podHookUndo is the rollback's NRI RemovePodSandbox for a pod whose
// RunPodSandbox was sent (h set); it does nothing before that.
type podHookUndo struct {
	h    nriHooks
	view *api.PodSandbox
}

func (u *podHookUndo) removePod(ctx context.Context) error {
	if u.h == nil {
		return nil
	}
	return u.h.RemovePodSandbox(ctx, proto.Clone(u.view).(*api.PodSandbox))
}

func validatePodConfig(cfg *runtimeapi.PodSandboxConfig) error {
	if cfg == nil {
		return fmt.Errorf("config: must be set: %w", errdefs.ErrInvalidArgument)
	}
	md := cfg.GetMetadata()
	switch {
	case md == nil:
		return fmt.Errorf("config.metadata: must be set: %w", errdefs.ErrInvalidArgument)
	case md.Name == "":
		return fmt.Errorf("config.metadata.name: must not be empty: %w", errdefs.ErrInvalidArgument)
	case md.Namespace == "":
		return fmt.Errorf("config.metadata.namespace: must not be empty: %w", errdefs.ErrInvalidArgument)
	case md.Uid == "":
		return fmt.Errorf("config.metadata.uid: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	for _, kv := range []struct{ field, v string }{{"name", md.Name}, {"namespace", md.Namespace}, {"uid", md.Uid}} {
		if len(kv.v) > 253 || containsAny(kv.v, "/\x00\n_") && kv.field != "uid" {
			return fmt.Errorf("config.metadata.%s %q: must be at most 253 bytes without '/', '_', NUL or newline: %w", kv.field, kv.v, errdefs.ErrInvalidArgument)
		}
	}
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_CONTAINER {
		return fmt.Errorf("config.linux.security_context.namespace_options.network CONTAINER: not supported for a pod: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

func containsAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return true
			}
		}
	}
	return false
}

func cniPod(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig) cni.Pod {
	md := cfg.GetMetadata()
	p := cni.Pod{ID: rec.ID, Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), NetNS: rec.NetNS}
	for _, pm := range cfg.GetPortMappings() {
		proto := "tcp"
		switch pm.Protocol {
		case runtimeapi.Protocol_UDP:
			proto = "udp"
		case runtimeapi.Protocol_SCTP:
			proto = "sctp"
		}
		if pm.HostPort == 0 {
			continue
		}
		p.Ports = append(p.Ports, cni.PortMapping{Protocol: proto, ContainerPort: pm.ContainerPort, HostPort: pm.HostPort, HostIP: pm.HostIp})
	}
	return p
}

// showPins puts the pinned paths into the infra spec's namespaces, so NRI
// plugins see the paths containers join by.
func showPins(spec *specs.Spec, rec *store.Sandbox) {
	if spec.Linux == nil {
		return
	}
	for i, n := range spec.Linux.Namespaces {
		p := ""
		switch n.Type {
		case specs.IPCNamespace:
			p = rec.IPCNS
		case specs.UTSNamespace:
			p = rec.UTSNS
		case specs.PIDNamespace:
			p = rec.PIDNS
		}
		if p != "" && n.Path == "" {
			spec.Linux.Namespaces[i].Path = p
		}
	}
}

// startPodShim starts the shim of a pod without an infra process (on a
// backend that runs one per pod, runtime.PodShims) in the background,
// while RunPodSandbox sets up the pod's namespaces and network, so that
// its first StartContainer is one request to it and one runtime command.
// It returns the wait for that start, which RunPodSandbox's success path
// and its undo both call. A failure is only logged: the first container's
// start starts the shim then. A pod with an infra process gets its shim
// with the infra process.
func (s *Service) startPodShim(ctx context.Context, rt runtime.Runtime, rec *store.Sandbox, undo *rollback) (wait func()) {
	ps, ok := rt.(runtime.PodShims)
	if !ok || !rec.NoInfra {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ps.StartPodShim(ctx, rec.ID); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "start pod shim ahead of its containers", "pod_id", rec.ID, "error", err)
		}
	}()
	wait = func() { <-done }
	undo.add("release pod shim", func(ctx context.Context) error {
		wait()
		return ps.ReleasePodShim(ctx, rec.ID)
	})
	return wait
}

// releasePodShim makes the shim of a pod without an infra process exit
// if it holds no container (StopPodSandbox, RemovePodSandbox, recovery of
// a half-made pod): a pod that never got a container would otherwise keep
// the shim RunPodSandbox started until its idle timeout. A failure is
// logged: the shim still exits when idle.
func (s *Service) releasePodShim(ctx context.Context, rec *store.Sandbox) {
	ps, ok := s.opts.Runtimes[rec.RuntimeHandler].(runtime.PodShims)
	if !ok || !rec.NoInfra {
		return
	}
	if err := ps.ReleasePodShim(ctx, rec.ID); err != nil {
		s.log.WarnContext(ctx, "release pod shim", "pod_id", rec.ID, "error", err)
	}
}
