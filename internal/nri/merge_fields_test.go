package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/crin-dev/crin/internal/nri/fields"
)

// TestMergerKeepsEveryField walks every field of NRI's ContainerAdjustment
// (protoreflect: a field a new NRI version adds is walked too), has one
// plugin set it, and checks that the merged adjustment carries it and that
// the plugin is recorded as the owner of something (what crinctl owners
// and validators see). A field the merger drops fails here until it is
// merged.
func TestMergerKeepsEveryField(t *testing.T) {
	for _, leaf := range fields.Leaves((&api.ContainerAdjustment{}).ProtoReflect().Descriptor()) {
		name, l := leaf.Path, leaf.Fields
		t.Run(name, func(t *testing.T) {
			adj := &api.ContainerAdjustment{}
			fill(adj.ProtoReflect(), l)
			ctr := testCtr("pod1", "ctr1")
			if ctr.Linux == nil {
				ctr.Linux = &api.LinuxContainer{}
			}
			ctr.Linux.Rdt = &api.LinuxRdt{ClosId: api.String("gold")} // for Rdt.Remove to remove
			m := newMerger(testPod("pod1"), ctr)
			if err := m.applyCreate("10-p", adj, nil); err != nil {
				return // refused: not dropped
			}
			got, _, owners := m.result()
			if !has(got.ProtoReflect(), l) {
				t.Errorf("%s set by a plugin is not in the merged adjustment %v", name, got)
			}
			if why, ok := ownerless[name]; ok {
				t.Logf("%s has no owner: %s", name, why)
			} else if len(OwnersTable(owners, "ctr1")) == 0 {
				t.Errorf("%s set by a plugin records no owner", name)
			}
		})
	}
}

// ownerless are the adjustment fields NRI's OwningPlugins has no field
// for; they accumulate in plugin order, and no plugin owns them.
var ownerless = map[string]string{
	"linux.resources.devices": "device cgroup rules (NRI v1 emulation): api.Field has none",
}

// fill sets the field at path in m to a non-zero value (one entry, under
// key "k1", for lists and maps).
func fill(m protoreflect.Message, path []protoreflect.FieldDescriptor) {
	f := path[0]
	if len(path) > 1 {
		fill(m.Mutable(f).Message(), path[1:])
		return
	}
	switch {
	case f.IsMap():
		mp := m.Mutable(f).Map()
		mp.Set(protoreflect.ValueOfString("k1").MapKey(), scalar(f.MapValue(), mp.NewValue))
	case f.IsList():
		l := m.Mutable(f).List()
		l.Append(scalar(f, l.NewElement))
	default:
		m.Set(f, scalar(f, func() protoreflect.Value { return m.NewField(f) }))
	}
}

// scalar is a non-zero value of f's kind; a message gets its first scalar
// field set (a string "v1" or the number 3), or is left empty.
func scalar(f protoreflect.FieldDescriptor, newMsg func() protoreflect.Value) protoreflect.Value {
	if v, ok := fields.Scalar(f); ok {
		return v
	}
	v := newMsg()
	fs := v.Message().Descriptor().Fields()
	for i := 0; i < fs.Len(); i++ {
		if sf := fs.Get(i); sf.Kind() != protoreflect.MessageKind && !sf.IsList() && !sf.IsMap() {
			v.Message().Set(sf, scalar(sf, nil))
			break
		}
	}
	return v
}

// has reports whether the field at path is set in m.
func has(m protoreflect.Message, path []protoreflect.FieldDescriptor) bool {
	f := path[0]
	if !m.Has(f) {
		return false
	}
	if len(path) == 1 {
		return true
	}
	return has(m.Get(f).Message(), path[1:])
}
