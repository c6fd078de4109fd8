package oci

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
	for _, leaf := range leaves((&api.ContainerAdjustment{}).ProtoReflect().Descriptor(), "") {
		t.Run(leaf.path, func(t *testing.T) {
			c := companionOf(adjustmentCompanions, leaf.path)
			base := &api.ContainerAdjustment{}
			if c.set != nil {
				c.set(base.ProtoReflect())
			}
			was := outcome(base, c.spec)
			for _, v := range candidates(leaf.fields[len(leaf.fields)-1]) {
				adj := proto.Clone(base).(*api.ContainerAdjustment)
				setLeaf(adj.ProtoReflect(), leaf.fields, v)
				if outcome(adj, c.spec) != was {
					return
				}
			}
			t.Errorf("%s: no value of it changes the adjusted spec or is refused: the field is dropped", leaf.path)
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
	for _, leaf := range leaves((&api.LinuxResources{}).ProtoReflect().Descriptor(), "") {
		t.Run(leaf.path, func(t *testing.T) {
			for _, v := range candidates(leaf.fields[len(leaf.fields)-1]) {
				res := &api.LinuxResources{}
				setLeaf(res.ProtoReflect(), leaf.fields, v)
				if outcome(res) != was {
					return
				}
			}
			t.Errorf("%s: no value of it changes the resources or is refused: the field is dropped", leaf.path)
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

// leaf is a settable field, reached from the top message through fields.
type leaf struct {
	path   string
	fields []protoreflect.FieldDescriptor
}

// leaves lists the fields of md, going into message fields (not into
// NRI's Optional* wrappers, whose one value is set as the leaf).
func leaves(md protoreflect.MessageDescriptor, prefix string) []leaf {
	var out []leaf
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		path := prefix + string(f.Name())
		if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() && !wrapper(f.Message()) {
			for _, l := range leaves(f.Message(), path+".") {
				out = append(out, leaf{path: l.path, fields: append([]protoreflect.FieldDescriptor{f}, l.fields...)})
			}
			continue
		}
		out = append(out, leaf{path: path, fields: []protoreflect.FieldDescriptor{f}})
	}
	return out
}

// wrapper reports whether md is one of NRI's Optional* value wrappers.
func wrapper(md protoreflect.MessageDescriptor) bool {
	return strings.HasPrefix(string(md.Name()), "Optional") && md.Fields().Len() == 1
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
	if kind.Kind() == protoreflect.MessageKind && wrapper(kind.Message()) {
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
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("v1")
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(3)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(3)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(3)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(3)
	case protoreflect.EnumKind:
		vs := f.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("v1"))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(3)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(3)
	}
	v := newMsg()
	msg := v.Message()
	fs := msg.Descriptor().Fields()
	for i := 0; i < fs.Len(); i++ {
		sf := fs.Get(i)
		if sf.Kind() == protoreflect.MessageKind || sf.IsList() || sf.IsMap() {
			if sf.Kind() == protoreflect.MessageKind && !sf.IsList() && !sf.IsMap() && wrapper(sf.Message()) {
				msg.Set(sf, valueOf(sf, func() protoreflect.Value { return msg.NewField(sf) }))
			}
			continue
		}
		msg.Set(sf, valueOf(sf, nil))
	}
	return v
}
