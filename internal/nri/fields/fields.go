// Package fields walks the fields of NRI's protobuf messages, for the
// tests that set every field of an adjustment or an update in turn (so
// that a field a new NRI version adds is walked too, and fails them until
// crind handles it).
package fields

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Leaf is a field that holds a value, reached from the top message
// through Fields; Path names it ("linux.resources.memory.limit").
type Leaf struct {
	Path   string
	Fields []protoreflect.FieldDescriptor
}

// Leaves lists the leaves of md: its fields, going into message fields
// other than NRI's Optional* wrappers (whose one value is the leaf's).
func Leaves(md protoreflect.MessageDescriptor) []Leaf {
	return leaves(md, "")
}

func leaves(md protoreflect.MessageDescriptor, prefix string) []Leaf {
	var out []Leaf
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		f := fs.Get(i)
		path := prefix + string(f.Name())
		if f.Kind() == protoreflect.MessageKind && !f.IsList() && !f.IsMap() && !IsWrapper(f.Message()) {
			for _, l := range leaves(f.Message(), path+".") {
				out = append(out, Leaf{Path: l.Path, Fields: append([]protoreflect.FieldDescriptor{f}, l.Fields...)})
			}
			continue
		}
		out = append(out, Leaf{Path: path, Fields: []protoreflect.FieldDescriptor{f}})
	}
	return out
}

// IsWrapper reports whether md is one of NRI's Optional* value wrappers.
func IsWrapper(md protoreflect.MessageDescriptor) bool {
	return strings.HasPrefix(string(md.Name()), "Optional") && md.Fields().Len() == 1
}

// Scalar is a non-zero value of f's kind when f holds a scalar (a string
// "v1", the number 3, true, the enum's last value); ok is false for a
// message.
func Scalar(f protoreflect.FieldDescriptor) (v protoreflect.Value, ok bool) {
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("v1"), true
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(3), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(3), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(3), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(3), true
	case protoreflect.EnumKind:
		vs := f.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number()), true
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("v1")), true
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(3), true
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(3), true
	}
	return protoreflect.Value{}, false
}
