package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestMergeOneShotMatches runs the same plugin responses through a merger
// as CreateContainer uses it (oneShot, lastView, result: no copies) and
// through one that keeps rollback copies and copies its results: every
// plugin must see the same container and the results must be the same.
func TestMergeOneShotMatches(t *testing.T) {
	fields := mergeTestKeyedFields()
	orig := &api.Container{Id: "ctr"}
	for _, f := range fields {
		f.orig(orig, f.key+"-old")
	}
	// And what no plugin touches.
	orig.Name, orig.Labels = "app", map[string]string{"tier": "web"}
	orig.Env = append(orig.Env, "PATH=/bin")
	orig.Annotations["keep"] = "1"
	// Three plugins: each sets its own key of every keyed field, the
	// first also removes the keys the container had; scalars, hooks and
	// updates of another container in between.
	responses := func() [][2]any {
		var out [][2]any
		for i, plugin := range []string{"10-a", "20-b", "30-c"} {
			a := &api.ContainerAdjustment{}
			for _, f := range fields {
				f.set(a, f.key+"-"+plugin)
				if i == 0 {
					f.remove(a, f.key+"-old")
				}
			}
			var upds []*api.ContainerUpdate
			switch i {
			case 0:
				a.SetLinuxMemoryLimit(100)
				a.AddHooks(&api.Hooks{Prestart: []*api.Hook{{Path: "/bin/a"}}})
			case 1:
				a.SetLinuxCPUShares(10)
				u := &api.ContainerUpdate{ContainerId: "other"}
				u.SetLinuxMemoryLimit(5)
				upds = append(upds, u)
			case 2:
				a.AddHooks(&api.Hooks{Poststop: []*api.Hook{{Path: "/bin/c"}}})
				a.SetArgs([]string{"/bin/app"})
			}
			out = append(out, [2]any{a, upds})
		}
		return out
	}
	plugins := []string{"10-a", "20-b", "30-c"}

	slow := newMerger(nil, proto.Clone(orig).(*api.Container))
	fast := newMerger(nil, orig)
	fast.oneShot = true
	pristine := proto.Clone(orig).(*api.Container)
	slowRsp, fastRsp := responses(), responses()
	for i, plugin := range plugins {
		if diff := cmp.Diff(slow.container(), fast.view(), protocmp.Transform()); diff != "" {
			t.Fatalf("container seen by %s (-rollback merger +oneShot):\n%s", plugin, diff)
		}
		if err := slow.applyCreate(plugin, slowRsp[i][0].(*api.ContainerAdjustment), slowRsp[i][1].([]*api.ContainerUpdate)); err != nil {
			t.Fatalf("rollback merger, %s: %v", plugin, err)
		}
		if i == len(plugins)-1 {
			fast.lastView()
		}
		if err := fast.applyCreate(plugin, fastRsp[i][0].(*api.ContainerAdjustment), fastRsp[i][1].([]*api.ContainerUpdate)); err != nil {
			t.Fatalf("oneShot merger, %s: %v", plugin, err)
		}
	}
	adj, upds, own := fast.result()
	if diff := cmp.Diff(slow.adjustment(), adj, protocmp.Transform()); diff != "" {
		t.Errorf("adjustment (-rollback merger +oneShot):\n%s", diff)
	}
	if diff := cmp.Diff(slow.updates(), upds, protocmp.Transform()); diff != "" {
		t.Errorf("updates (-rollback merger +oneShot):\n%s", diff)
	}
	if diff := cmp.Diff(slow.owners(), own, protocmp.Transform()); diff != "" {
		t.Errorf("owners (-rollback merger +oneShot):\n%s", diff)
	}
	if diff := cmp.Diff(pristine, orig, protocmp.Transform()); diff != "" {
		t.Errorf("oneShot merger modified its input (-pristine +now):\n%s", diff)
	}
}

// TestMergeNoChangeNoCopy: responses that change nothing leave the merger
// reading the caller's container, and its result empty.
func TestMergeNoChangeNoCopy(t *testing.T) {
	orig := &api.Container{Id: "ctr", Env: []string{"A=1"}}
	m := newMerger(nil, orig)
	m.oneShot = true
	for _, adj := range []*api.ContainerAdjustment{nil, {}} {
		if err := m.applyCreate("10-a", adj, nil); err != nil {
			t.Fatal(err)
		}
	}
	if m.view() != orig {
		t.Error("the container was copied although no plugin changed it")
	}
	adj, upds, own := m.result()
	if diff := cmp.Diff(&api.ContainerAdjustment{}, adj, protocmp.Transform()); diff != "" {
		t.Errorf("adjustment (-want +got):\n%s", diff)
	}
	if upds != nil || own != nil {
		t.Errorf("updates %v, owners %v; want none", upds, own)
	}
}
