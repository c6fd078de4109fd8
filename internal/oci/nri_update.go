package oci

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ApplyUpdate returns cur with the NRI update applied. Fields the
// runtime's update command cannot change on a running container are an
// error naming them, never dropped. cur is not modified.
//
// runc update (1.1) changes, on a running container: memory limit,
// reservation, swap and kernel TCP limit; CPU shares, quota, period,
// realtime runtime and period, cpuset cpus and mems; the block I/O weight;
// the pids limit; unified cgroup v2 files; Intel RDT L3 and memory
// bandwidth schemata. It cannot change memory swappiness, the OOM killer
// switch, use_hierarchy, hugepage limits, device rules, block I/O
// settings other than the weight, or the RDT class (CLOS): an update that
// sets one of these to something other than its current value fails.
// RDT classes are refused outright because OCI resources do not carry
// RDT settings, so the result could not express them. On cgroup v2 an
// unset use_hierarchy is true (v2 is always hierarchical), so asking for
// true there is no change. Memory kernel limits are refused as at
// creation (runtimes ignore them); a kernel limit of 0 means "no limit"
// and is accepted.
func ApplyUpdate(cur *specs.LinuxResources, upd *api.LinuxResources, o UpdateOptions) (*specs.LinuxResources, error) {
	out, err := cloneResources(cur)
	if err != nil {
		return nil, err
	}
	if upd == nil {
		return out, nil
	}
	rt, err := newRuntimeFeatures(o.RuntimeName, o.Features)
	if err != nil {
		return nil, err
	}
	who := func(field, key string) string {
		if p := resourceOwner(o.Owners, o.ContainerID, field, key); p != "" {
			return p
		}
		return o.Plugin
	}
	m := &resourceMerge{
		verb: "updates", who: who, request: o.Request,
		host: hostOrDetect(o.Host), rt: rt, memswFile: o.memswFile, blockio: o.BlockioClass,
	}
	upd, err = frozenFields(out, upd, m, &o)
	if err != nil {
		return nil, err
	}
	if err := m.merge(out, upd); err != nil {
		return nil, err
	}
	return out, nil
}

// cloneResources deep-copies r (nil gives empty resources).
func cloneResources(r *specs.LinuxResources) (*specs.LinuxResources, error) {
	out := &specs.LinuxResources{}
	if r == nil {
		return out, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("copy resources: %w", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("copy resources: %w", err)
	}
	return out, nil
}

// frozenFields refuses an update that changes what runc update cannot
// change on a running container (see ApplyUpdate). It returns what is
// left to merge.
func frozenFields(cur *specs.LinuxResources, upd *api.LinuxResources, m *resourceMerge, o *UpdateOptions) (*api.LinuxResources, error) {
	frozen := func(field string, have, want any) error {
		return m.fail(field, "", unsupportedf("%s: %s update cannot change it on a running container (current %s, wanted %s)",
			field, m.rt.name, show(have), show(want)))
	}
	mem := cur.Memory
	if mem == nil {
		mem = &specs.LinuxMemory{}
	}
	if v := upd.GetMemory().GetSwappiness(); v != nil && (mem.Swappiness == nil || *mem.Swappiness != v.Value) {
		return nil, frozen(fMemSwappiness, mem.Swappiness, v.Value)
	}
	if v := upd.GetMemory().GetDisableOomKiller(); v != nil {
		// Unset means the OOM killer is on.
		if have := mem.DisableOOMKiller != nil && *mem.DisableOOMKiller; have != v.Value {
			return nil, frozen(fMemNoOOMKill, have, v.Value)
		}
	}
	if v := upd.GetMemory().GetUseHierarchy(); v != nil {
		have := mem.UseHierarchy
		if have == nil && m.host.CgroupV2 {
			// cgroup v2 is always hierarchical: unset means true.
			have = new(true)
		}
		if have == nil || *have != v.Value {
			return nil, frozen(fMemHierarchy, mem.UseHierarchy, v.Value)
		}
	}
	for _, h := range upd.HugepageLimits {
		if h == nil {
			continue
		}
		// A bad size is a bad value before it is a frozen field.
		if err := checkHugepageSize(fmt.Sprintf("%s[%q].pageSize", fHugepages, h.PageSize), h.PageSize); err != nil {
			return nil, m.fail(fHugepages, h.PageSize, err)
		}
		var have *uint64
		for _, c := range cur.HugepageLimits {
			if c.Pagesize == h.PageSize {
				have = new(c.Limit)
			}
		}
		if have == nil || *have != h.Limit {
			return nil, frozen(fmt.Sprintf("%s[%q]", fHugepages, h.PageSize), have, h.Limit)
		}
	}
	if len(upd.Devices) > 0 {
		want := make([]specs.LinuxDeviceCgroup, 0, len(upd.Devices))
		for _, d := range upd.Devices {
			if d != nil {
				want = append(want, specs.LinuxDeviceCgroup{Allow: d.Allow, Type: d.Type, Major: d.Major.Get(), Minor: d.Minor.Get(), Access: d.Access})
			}
		}
		if !reflect.DeepEqual(want, cur.Devices) {
			return nil, frozen(fDevices, fmt.Sprintf("%d rules", len(cur.Devices)), fmt.Sprintf("%d different rules", len(want)))
		}
		// Merging would append them a second time.
		upd = shallowWithoutDevices(upd)
	}
	if c := upd.BlockioClass; c != nil && c.Value != "" && o.BlockioClass != nil {
		field := fmt.Sprintf("%s %q", fBlockioClass, c.Value)
		b, err := o.BlockioClass(c.Value)
		if err != nil {
			return nil, m.fail(fBlockioClass, "", classError(field, err))
		}
		if !reflect.DeepEqual(weightless(b), weightless(cur.BlockIO)) {
			return nil, m.fail(fBlockioClass, "", unsupportedf("%s: %s update can change only the block I/O weight of a running container, and the class sets more", field, m.rt.name))
		}
	}
	if c := upd.BlockioClass; c != nil && c.Value == "" && cur.BlockIO != nil && weightless(cur.BlockIO) != nil {
		return nil, frozen(fBlockioClass, "a class", "none")
	}
	if c := upd.RdtClass; c != nil {
		return nil, m.fail(fRdtClass, "", unsupportedf("%s %q: crin cannot change the RDT class of a running container", fRdtClass, c.Value))
	}
	// A kernel memory limit is refused (and 0 accepted) by the merge, as
	// at creation.
	return upd, nil
}

// shallowWithoutDevices returns upd without its device rules.
func shallowWithoutDevices(upd *api.LinuxResources) *api.LinuxResources {
	c := upd.Copy()
	c.Devices = nil
	return c
}

// weightless is b without its weight: what runc update cannot change.
// Nil and empty are the same.
func weightless(b *specs.LinuxBlockIO) *specs.LinuxBlockIO {
	if b == nil {
		return nil
	}
	c := *b
	c.Weight = nil
	if reflect.DeepEqual(c, specs.LinuxBlockIO{}) {
		return nil
	}
	return &c
}

// show prints a possibly nil pointer for an error message.
func show(v any) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "unset"
		}
		return fmt.Sprint(rv.Elem().Interface())
	}
	return fmt.Sprint(v)
}
