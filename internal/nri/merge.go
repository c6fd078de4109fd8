package nri

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

// merger accumulates the responses of the plugins called for one
// CreateContainer (or UpdateContainer / StopContainer) event, in plugin index
// order, enforcing one owner per field.
//
// Contract between the event dispatcher (plugin.go, adaptation.go) and the
// merger (merge.go, validate.go):
//
//	m := newMerger(pod, ctr)          // pristine pod and container
//	m.oneShot = true                  // an error fails the request: no rollback copies
//	for each subscribed plugin in index order {
//	    req.Container = m.view()       // the container as adjusted so far
//	    rsp := call plugin
//	    if it is the last one { m.lastView() }
//	    if err := m.applyCreate(p.id(), rsp.Adjust, rsp.Update); err != nil { fail request }
//	}
//	adj, upds, owners := m.result()   // handed over, not copied
//
// The merger allocates nothing until a plugin answers with a change, and
// copies the container only when a plugin changes it and a later plugin
// is to see the result.
//
// For UpdateContainer/StopContainer responses only updates are merged with
// m.applyUpdates(pluginID, updates).
//
// Ownership follows the api package's conventions so that validators can use
// the api helpers (api.OwningPlugins.EnvOwner and friends): a field, or one
// key of a map or keyed list, is owned by the first plugin that sets or
// removes it; a removal is recorded as the plugin's name with a removal mark
// ("-10-a"); OCI hooks are not owned but accumulate, their owner entry lists
// every contributing plugin ("10-a,20-b"). A plugin may remove a key and set
// it again, but never touch one another plugin has touched.
//
// A merger is not safe for concurrent use: one event owns it.
type merger struct {
	// orig is the pristine container; it is never modified.
	orig *api.Container
	// st is everything the applied plugin responses have changed.
	st mergeState
	// oneShot says a failed apply ends the merge (the request fails), so
	// no copy of the state is kept to roll back to.
	oneShot bool
	// viewless says no plugin sees the container after the next apply
	// (lastView): it is then not kept up to date.
	viewless bool
}

// mergeState is the part of a merger that plugin responses change. Unless
// the merger is oneShot, it is snapshotted before each response, so a
// rejected response leaves no trace. Its parts are nil until a response
// needs them.
type mergeState struct {
	ctr   *api.Container           // the container as adjusted so far
	adj   *api.ContainerAdjustment // merged adjustment, removal marks kept
	own   *api.OwningPlugins       // field owners per container ID
	upds  map[string]*api.ContainerUpdate
	order []string // container IDs of upds, in the order first updated
}

// newMerger starts a merge for ctr of pod. The inputs are not modified, and
// must not be while the merger is in use: the merger reads ctr instead of
// copying it, and copies it only when a plugin first adjusts it. The pod is
// not needed for merging; it is accepted so that the dispatcher can hand
// over the whole event.
func newMerger(pod *api.PodSandbox, ctr *api.Container) *merger {
	_ = pod
	if ctr == nil {
		ctr = &api.Container{}
	}
	return &merger{orig: ctr, st: mergeState{ctr: ctr}}
}

// snapshot copies the state for a rollback. The container is shared while
// no plugin has adjusted it (it is then the pristine, read-only input).
func (m *merger) snapshot() mergeState {
	s := m.st
	if m.oneShot {
		return s
	}
	c := mergeState{ctr: s.ctr, order: slices.Clone(s.order)}
	if s.adj != nil {
		c.adj = proto.Clone(s.adj).(*api.ContainerAdjustment)
	}
	if s.own != nil {
		c.own = proto.Clone(s.own).(*api.OwningPlugins)
	}
	if s.ctr != m.orig {
		c.ctr = proto.Clone(s.ctr).(*api.Container)
	}
	if s.upds != nil {
		c.upds = make(map[string]*api.ContainerUpdate, len(s.upds))
		for id, u := range s.upds {
			c.upds[id] = proto.Clone(u).(*api.ContainerUpdate)
		}
	}
	return c
}

// liveCtr returns the adjusted container for writing, copying the pristine
// input on the first write. After lastView it is a scratch container that
// nobody reads, so the copy is not made.
func (m *merger) liveCtr() *api.Container {
	if m.st.ctr == m.orig {
		if m.viewless {
			m.st.ctr = &api.Container{Id: m.orig.GetId()}
		} else {
			m.st.ctr = proto.Clone(m.orig).(*api.Container)
		}
	}
	return m.st.ctr
}

// lastView tells the merger that no plugin will see the container after
// the next apply: view and container are not to be used any more.
func (m *merger) lastView() { m.viewless = true }

// adjusting returns the merged adjustment for writing.
func (m *merger) adjusting() *api.ContainerAdjustment {
	if m.st.adj == nil {
		m.st.adj = &api.ContainerAdjustment{}
	}
	return m.st.adj
}

// container returns the container as adjusted by the plugins applied so far
// (a copy the caller may hand to the next plugin).
func (m *merger) container() *api.Container {
	return proto.Clone(m.st.ctr).(*api.Container)
}

// view returns the container as adjusted so far without copying it: the
// caller must not modify it nor keep it past the next apply. It is what a
// request to the next plugin is marshalled from.
func (m *merger) view() *api.Container {
	return m.st.ctr
}

// applyCreate merges one plugin's CreateContainer response. A field (or map
// key / keyed list item) already owned by another plugin is an error naming
// both plugins and the field; an update targeting the container being
// created is an error. On error nothing of the response is merged (unless
// the merger is oneShot: it is then not to be used any more). The merger
// takes adj over: parts of it become parts of the result, so the caller
// must not modify it afterwards.
//
// Errors: a *mergeConflictError (errdefs.ErrConflict) for a field owned by
// another plugin, errdefs.ErrInvalidArgument for a malformed response or an
// update of the container being created.
func (m *merger) applyCreate(plugin string, adj *api.ContainerAdjustment, upds []*api.ContainerUpdate) error {
	if adj == nil && len(upds) == 0 {
		return nil
	}
	for _, u := range upds {
		if u != nil && u.GetContainerId() == m.orig.GetId() {
			return fmt.Errorf("merge response of plugin %q: update of container %q, which is being created (adjust it instead): %w",
				plugin, u.GetContainerId(), errdefs.ErrInvalidArgument)
		}
	}
	saved := m.snapshot()
	if err := m.mergeAdjustment(plugin, adj); err != nil {
		m.st = saved
		return err
	}
	if err := m.mergeUpdates(plugin, upds); err != nil {
		m.st = saved
		return err
	}
	return nil
}

// applyUpdates merges one plugin's updates to (other) containers, with the
// same ownership rules per container. An update of the merger's own
// container is allowed here (UpdateContainer plugins amend the pending
// update that way) and is also reflected in container(). On error nothing
// of the updates is merged.
func (m *merger) applyUpdates(plugin string, upds []*api.ContainerUpdate) error {
	if len(upds) == 0 {
		return nil
	}
	saved := m.snapshot()
	if err := m.mergeUpdates(plugin, upds); err != nil {
		m.st = saved
		return err
	}
	return nil
}

// adjustment returns the merged adjustment (nil-safe, never nil). Items of
// the original container that plugins removed keep their removal marks
// ("-KEY" keys, Rdt.Remove) so the spec applier can drop them; a removal
// followed by a set of the same key is given as the mark, then the item.
func (m *merger) adjustment() *api.ContainerAdjustment {
	if m == nil || m.st.adj == nil {
		return &api.ContainerAdjustment{}
	}
	return stripAdjustment(proto.Clone(m.st.adj).(*api.ContainerAdjustment))
}

func stripAdjustment(a *api.ContainerAdjustment) *api.ContainerAdjustment {
	if a = a.Strip(); a == nil {
		return &api.ContainerAdjustment{}
	}
	return a
}

// updates returns the merged updates, one per container, in the order the
// containers were first updated.
func (m *merger) updates() []*api.ContainerUpdate {
	if m == nil {
		return nil
	}
	return m.st.updateList(func(u *api.ContainerUpdate) *api.ContainerUpdate {
		return proto.Clone(u).(*api.ContainerUpdate)
	})
}

func (s *mergeState) updateList(cp func(*api.ContainerUpdate) *api.ContainerUpdate) []*api.ContainerUpdate {
	if len(s.order) == 0 {
		return nil
	}
	out := make([]*api.ContainerUpdate, 0, len(s.order))
	for _, id := range s.order {
		if u := cp(s.upds[id]).Strip(); u != nil {
			out = append(out, u)
		}
	}
	return out
}

// owners returns which plugin owns which field, as sent to validators.
func (m *merger) owners() *api.OwningPlugins {
	if m == nil || m.st.own == nil {
		return api.NewOwningPlugins()
	}
	return proto.Clone(m.st.own).(*api.OwningPlugins)
}

// result is adjustment, updates and owners without copies: the merged
// state is handed over, and the merger must not be used afterwards. The
// owners are nil when no plugin changed anything.
func (m *merger) result() (*api.ContainerAdjustment, []*api.ContainerUpdate, *api.OwningPlugins) {
	var adj *api.ContainerAdjustment
	if m.st.adj != nil {
		adj = stripAdjustment(m.st.adj)
	} else {
		adj = &api.ContainerAdjustment{}
	}
	upds := m.st.updateList(func(u *api.ContainerUpdate) *api.ContainerUpdate { return u })
	own := m.st.own
	m.st = mergeState{}
	return adj, upds, own
}

// mergeConflictError reports two plugins adjusting the same field (or the
// same key of a compound field) of one container.
type mergeConflictError struct {
	Field     api.Field
	Key       string // the map key or list item; empty for a simple field
	Owner     string // the plugin that touched the field first
	Plugin    string // the plugin that tried to touch it again
	Container string // set for updates of existing containers
}

func (e *mergeConflictError) Error() string {
	what := mergeFieldName(e.Field)
	if e.Key != "" {
		what += fmt.Sprintf(" %q", e.Key)
	}
	if e.Container != "" {
		return fmt.Sprintf("plugins %q and %q both update %s of container %q", e.Owner, e.Plugin, what, e.Container)
	}
	return fmt.Sprintf("plugins %q and %q both adjust %s", e.Owner, e.Plugin, what)
}

// Unwrap classifies the conflict for errdefs.IsConflict.
func (e *mergeConflictError) Unwrap() error { return errdefs.ErrConflict }

// mergeFieldNames name the fields in errors; read only.
var mergeFieldNames = map[api.Field]string{
	api.Field_Annotations:         "annotation",
	api.Field_Mounts:              "mount",
	api.Field_OciHooks:            "OCI hooks",
	api.Field_Devices:             "device",
	api.Field_CdiDevices:          "CDI device",
	api.Field_Env:                 "env",
	api.Field_Args:                "args",
	api.Field_MemLimit:            "memory limit",
	api.Field_MemReservation:      "memory reservation",
	api.Field_MemSwapLimit:        "memory swap limit",
	api.Field_MemKernelLimit:      "kernel memory limit",
	api.Field_MemTCPLimit:         "kernel TCP memory limit",
	api.Field_MemSwappiness:       "memory swappiness",
	api.Field_MemDisableOomKiller: "memory OOM killer disabling",
	api.Field_MemUseHierarchy:     "memory hierarchy accounting",
	api.Field_CPUShares:           "CPU shares",
	api.Field_CPUQuota:            "CPU quota",
	api.Field_CPUPeriod:           "CPU period",
	api.Field_CPURealtimeRuntime:  "CPU realtime runtime",
	api.Field_CPURealtimePeriod:   "CPU realtime period",
	api.Field_CPUSetCPUs:          "cpuset CPUs",
	api.Field_CPUSetMems:          "cpuset memory nodes",
	api.Field_PidsLimit:           "pids limit",
	api.Field_HugepageLimits:      "hugepage limit",
	api.Field_BlockioClass:        "block I/O class",
	api.Field_RdtClass:            "RDT class",
	api.Field_CgroupsUnified:      "unified cgroup resource",
	api.Field_CgroupsPath:         "cgroups path",
	api.Field_OomScoreAdj:         "OOM score adjustment",
	api.Field_Rlimits:             "rlimit",
	api.Field_IoPriority:          "I/O priority",
	api.Field_SeccompPolicy:       "seccomp policy",
	api.Field_Namespace:           "namespace",
	api.Field_Sysctl:              "sysctl",
	api.Field_LinuxNetDevices:     "net device",
	api.Field_LinuxSched:          "scheduler",
	api.Field_RdtClosID:           "RDT CLOS id",
	api.Field_RdtSchemata:         "RDT schemata",
	api.Field_RdtEnableMonitoring: "RDT monitoring",
	api.Field_MemoryPolicy:        "memory policy",
}

// mergeFieldName is the name of f used in errors.
func mergeFieldName(f api.Field) string {
	if n, ok := mergeFieldNames[f]; ok {
		return n
	}
	return f.String()
}

// mergeCall is one plugin's response being merged for one container.
type mergeCall struct {
	m      *merger
	fo     *api.FieldOwners
	id     string // container ID
	plugin string
	// update is set when merging an update of an existing container: the
	// merger does not know that container, so removal marks are kept.
	update bool
}

// createCall starts merging a plugin's adjustment of the merger's container.
func (m *merger) createCall(plugin string) *mergeCall {
	return &mergeCall{m: m, fo: m.fieldOwners(m.orig.GetId()), id: m.orig.GetId(), plugin: plugin}
}

// updateCall starts merging a plugin's update of container id.
func (m *merger) updateCall(id, plugin string) *mergeCall {
	return &mergeCall{m: m, fo: m.fieldOwners(id), id: id, plugin: plugin, update: true}
}

// fieldOwners returns the (created if missing) owners of container id.
func (m *merger) fieldOwners(id string) *api.FieldOwners {
	if m.st.own == nil {
		m.st.own = api.NewOwningPlugins()
	}
	fo, ok := m.st.own.Owners[id]
	if !ok || fo == nil {
		fo = api.NewFieldOwners()
		m.st.own.Owners[id] = fo
	}
	if fo.Simple == nil {
		fo.Simple = map[int32]string{}
	}
	if fo.Compound == nil {
		fo.Compound = map[int32]*api.CompoundFieldOwners{}
	}
	return fo
}

// claim makes the plugin the owner of field f, or of its key when key is
// not empty. Touching what another plugin touched (set or removed) is a
// conflict.
func (c *mergeCall) claim(f api.Field, key string) error {
	return c.take(f, key, c.plugin)
}

// claimRemoval is claim for a removal: the ownership is recorded with a
// removal mark, as the api's owner helpers expect.
func (c *mergeCall) claimRemoval(f api.Field, key string) error {
	return c.take(f, key, api.MarkForRemoval(c.plugin))
}

func (c *mergeCall) take(f api.Field, key, entry string) error {
	var (
		cur  string
		held bool
	)
	if key == "" {
		cur, held = c.fo.Simple[f.Key()]
	} else if co := c.fo.Compound[f.Key()]; co != nil {
		cur, held = co.Owners[key]
	}
	if held {
		if owner, _ := api.IsMarkedForRemoval(cur); owner != c.plugin {
			e := &mergeConflictError{Field: f, Key: key, Owner: owner, Plugin: c.plugin}
			if c.update {
				e.Container = c.id
			}
			return e
		}
	}
	if key == "" {
		c.fo.Simple[f.Key()] = entry
		return nil
	}
	co := c.fo.Compound[f.Key()]
	if co == nil || co.Owners == nil {
		co = api.NewCompoundFieldOwners()
		c.fo.Compound[f.Key()] = co
	}
	co.Owners[key] = entry
	return nil
}

// accumulate adds the plugin to the contributors of f (OCI hooks).
func (c *mergeCall) accumulate(f api.Field) {
	cur, ok := c.fo.Simple[f.Key()]
	switch {
	case !ok || cur == "":
		c.fo.Simple[f.Key()] = c.plugin
	case !slices.Contains(strings.Split(cur, ","), c.plugin):
		c.fo.Simple[f.Key()] = cur + "," + c.plugin
	}
}

// origHas tells whether the pristine container has key in compound field f,
// that is whether a removal of the key must reach the spec applier.
func (c *mergeCall) origHas(f api.Field, key string) bool {
	if c.update {
		return true
	}
	o := c.m.orig
	switch f {
	case api.Field_Annotations:
		_, ok := o.GetAnnotations()[key]
		return ok
	case api.Field_Mounts:
		return slices.ContainsFunc(o.GetMounts(), func(x *api.Mount) bool { return x.GetDestination() == key })
	case api.Field_Env:
		return slices.ContainsFunc(o.GetEnv(), func(x string) bool { return mergeEnvName(x) == key })
	case api.Field_Devices:
		return slices.ContainsFunc(o.GetLinux().GetDevices(), func(x *api.LinuxDevice) bool { return x.GetPath() == key })
	case api.Field_CdiDevices:
		return slices.ContainsFunc(o.GetCDIDevices(), func(x *api.CDIDevice) bool { return x.GetName() == key })
	case api.Field_Rlimits:
		return slices.ContainsFunc(o.GetRlimits(), func(x *api.POSIXRlimit) bool { return x.GetType() == key })
	case api.Field_HugepageLimits:
		return slices.ContainsFunc(o.GetLinux().GetResources().GetHugepageLimits(),
			func(x *api.HugepageLimit) bool { return x.GetPageSize() == key })
	case api.Field_Namespace:
		return slices.ContainsFunc(o.GetLinux().GetNamespaces(), func(x *api.LinuxNamespace) bool { return x.GetType() == key })
	case api.Field_CgroupsUnified:
		_, ok := o.GetLinux().GetResources().GetUnified()[key]
		return ok
	case api.Field_Sysctl:
		_, ok := o.GetLinux().GetSysctl()[key]
		return ok
	case api.Field_LinuxNetDevices:
		_, ok := o.GetLinux().GetNetDevices()[key]
		return ok
	}
	return false
}

// mergeEnvName is the variable name of an OCI "NAME=value" entry.
func mergeEnvName(kv string) string {
	name, _, _ := strings.Cut(kv, "=")
	return name
}
