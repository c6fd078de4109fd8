package oci

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/crin-dev/crin/internal/nri/fields"
)

// TestEveryAdjustmentFieldIsHandled walks every field of NRI's
// ContainerAdjustment (protoreflect, so a field a new NRI version adds is
// walked too) and sets it, alone or beside the fields that give it a
// meaning (adjustmentCompanions): the adjusted spec, or the refusal, must
// differ from what the adjustment gives without it. A field that changes
// nothing and is not refused is silently dropped, which crind never does
// to a plugin (docs/nri.md): this fails until the field is handled.
func TestEveryAdjustmentFieldIsHandled(t *testing.T) {
	o := AdjustOptions{ContainerID: testCtr, Features: newerFeatures(), RuntimeName: "runc", Host: hostV2, OOMScoreAdjMin: -1000}
	outcome := func(adj *api.ContainerAdjustment, spec func(*specs.Spec)) string {
		s := nriBaseSpec()
		if spec != nil {
			spec(s)
		}
		if err := ApplyAdjustment(s, adj, o); err != nil {
			return "refused: " + err.Error()
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	for _, leaf := range fields.Leaves((&api.ContainerAdjustment{}).ProtoReflect().Descriptor()) {
		t.Run(leaf.Path, func(t *testing.T) {
			c := companionOf(adjustmentCompanions, leaf.Path)
			base := &api.ContainerAdjustment{}
			if c.set != nil {
				c.set(base.ProtoReflect())
			}
			was := outcome(base, c.spec)
			for _, v := range candidates(leaf.Fields[len(leaf.Fields)-1]) {
				adj := proto.Clone(base).(*api.ContainerAdjustment)
				setLeaf(adj.ProtoReflect(), leaf.Fields, v)
				if outcome(adj, c.spec) != was {
					return
				}
			}
			t.Errorf("%s: no value of it changes the adjusted spec or is refused: the field is dropped", leaf.Path)
		})
	}
}

// TestEveryUpdateFieldIsHandled is TestEveryAdjustmentFieldIsHandled for
// NRI's LinuxResources as a ContainerUpdate carries them (ApplyUpdate).
func TestEveryUpdateFieldIsHandled(t *testing.T) {
	o := UpdateOptions{ContainerID: testCtr, Plugin: "10-a", Features: newerFeatures(), RuntimeName: "runc", Host: hostV2}
	outcome := func(res *api.LinuxResources) string {
		got, err := ApplyUpdate(curResources(), res, o)
		if err != nil {
			return "refused: " + err.Error()
		}
		b, _ := json.Marshal(got)
		return string(b)
	}
	was := outcome(&api.LinuxResources{})
	for _, leaf := range fields.Leaves((&api.LinuxResources{}).ProtoReflect().Descriptor()) {
		t.Run(leaf.Path, func(t *testing.T) {
			for _, v := range candidates(leaf.Fields[len(leaf.Fields)-1]) {
				res := &api.LinuxResources{}
				setLeaf(res.ProtoReflect(), leaf.Fields, v)
				if outcome(res) != was {
					return
				}
			}
			t.Errorf("%s: no value of it changes the resources or is refused: the field is dropped", leaf.Path)
		})
	}
}

// companion gives a field the context it means something in: the sibling
// fields it needs (set), or a spec that has what it acts on (spec).
type companion struct {
	set  func(protoreflect.Message)
	spec func(*specs.Spec)
}

// adjustmentCompanions, by field path prefix.
var adjustmentCompanions = map[string]companion{
	// Without a policy (SCHED_NONE) the runtime keeps its own: the other
	// fields mean nothing.
	"linux.scheduler.": {set: func(m protoreflect.Message) {
		m.Interface().(*api.ContainerAdjustment).Linux =
			&api.LinuxContainerAdjustment{Scheduler: &api.LinuxScheduler{Policy: api.LinuxSchedulerPolicy_SCHED_BATCH}}
	}},
	// Without a class (IOPRIO_CLASS_NONE) the kernel derives one.
	"linux.io_priority.priority": {set: func(m protoreflect.Message) {
		m.Interface().(*api.ContainerAdjustment).Linux =
			&api.LinuxContainerAdjustment{IoPriority: &api.LinuxIOPriority{Class: api.IOPrioClass_IOPRIO_CLASS_BE}}
	}},
	// Remove takes away the RDT settings the spec has.
	"linux.rdt.remove": {spec: func(s *specs.Spec) { s.Linux.IntelRdt = &specs.LinuxIntelRdt{ClosID: "gold"} }},
}

// companionOf is the companion whose prefix path starts with.
func companionOf(m map[string]companion, path string) companion {
	for p, c := range m {
		if strings.HasPrefix(path, p) {
			return c
		}
	}
	return companion{}
}

// setLeaf sets the field path fields leads to in m to v (an element or a
// map value for lists and maps, under key "k1"), making the messages on
// the way.
func setLeaf(m protoreflect.Message, fields []protoreflect.FieldDescriptor, v func(newMsg func() protoreflect.Value) protoreflect.Value) {
	f := fields[0]
	if len(fields) > 1 {
		setLeaf(m.Mutable(f).Message(), fields[1:], v)
		return
	}
	switch {
	case f.IsMap():
		mp := m.Mutable(f).Map()
		mp.Set(protoreflect.ValueOfString("k1").MapKey(), v(mp.NewValue))
	case f.IsList():
		l := m.Mutable(f).List()
		l.Append(v(l.NewElement))
	default:
		m.Set(f, v(func() protoreflect.Value { return m.NewField(f) }))
	}
}

// candidates are the values a leaf is tried with: for a bool (bare or in
// an Optional wrapper) both true and false, else one non-zero value.
func candidates(f protoreflect.FieldDescriptor) []func(func() protoreflect.Value) protoreflect.Value {
	kind, inner := f, f
	if f.IsMap() {
		inner = f.MapValue()
		kind = inner
	}
	if kind.Kind() == protoreflect.MessageKind && fields.IsWrapper(kind.Message()) {
		kind = kind.Message().Fields().Get(0)
	}
	if kind.Kind() != protoreflect.BoolKind {
		return []func(func() protoreflect.Value) protoreflect.Value{func(n func() protoreflect.Value) protoreflect.Value { return valueOf(inner, n) }}
	}
	var out []func(func() protoreflect.Value) protoreflect.Value
	for _, b := range []bool{true, false} {
		out = append(out, func(n func() protoreflect.Value) protoreflect.Value {
			if inner.Kind() != protoreflect.MessageKind {
				return protoreflect.ValueOfBool(b)
			}
			v := n()
			v.Message().Set(kind, protoreflect.ValueOfBool(b))
			return v
		})
	}
	return out
}

// valueOf is a value of f's kind: a non-zero scalar, or a message with
// each of its scalar fields set (messages in it left empty).
func valueOf(f protoreflect.FieldDescriptor, newMsg func() protoreflect.Value) protoreflect.Value {
	if v, ok := fields.Scalar(f); ok {
		return v
	}
	v := newMsg()
	msg := v.Message()
	fs := msg.Descriptor().Fields()
	for i := 0; i < fs.Len(); i++ {
		sf := fs.Get(i)
		if sf.Kind() == protoreflect.MessageKind || sf.IsList() || sf.IsMap() {
			if sf.Kind() == protoreflect.MessageKind && !sf.IsList() && !sf.IsMap() && fields.IsWrapper(sf.Message()) {
				msg.Set(sf, valueOf(sf, func() protoreflect.Value { return msg.NewField(sf) }))
			}
			continue
		}
		msg.Set(sf, valueOf(sf, nil))
	}
	return v
}
