package serving

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type ctxKey int

const requestKey ctxKey = 0

// requestInfo is what a request's context says about it, for logs.
type requestInfo struct {
	id  string
	rpc string
}

// withRequest returns ctx carrying a new request id and the RPC name.
func withRequest(ctx context.Context, rpc string) (context.Context, string) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return context.WithValue(ctx, requestKey, &requestInfo{id: id, rpc: rpc}), id
}

// RequestID returns the request id the interceptor put in ctx, or "".
func RequestID(ctx context.Context) string {
	if ri, ok := ctx.Value(requestKey).(*requestInfo); ok {
		return ri.id
	}
	return ""
}

// NewContextHandler wraps h so that every record logged with a request's
// context (log.InfoContext(ctx, ...)) carries the request's id and RPC
// (request_id, rpc), whichever logger derived from it writes the record.
// crind wraps its root handler with it, so the handlers' existing
// *Context calls, and the packages they call with ctx, need no change.
// Wrapping twice is wrapping once.
func NewContextHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*contextHandler); ok {
		return h
	}
	return &contextHandler{h: h}
}

type contextHandler struct{ h slog.Handler }

func (c *contextHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return c.h.Enabled(ctx, l)
}

func (c *contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if ri, ok := ctx.Value(requestKey).(*requestInfo); ok {
			r.AddAttrs(slog.String("request_id", ri.id), slog.String("rpc", ri.rpc))
		}
	}
	return c.h.Handle(ctx, r)
}

func (c *contextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &contextHandler{h: c.h.WithAttrs(as)}
}

func (c *contextHandler) WithGroup(name string) slog.Handler {
	return &contextHandler{h: c.h.WithGroup(name)}
}

// Size caps of what a request puts in the log.
const (
	maxSummary      = 1 << 10 // a failed request's summary
	maxSummaryValue = 128     // one value in it
	maxPayload      = 4 << 10 // a Debug payload
	summaryDepth    = 3       // nested messages a summary descends into
)

// requestSummary names what a request is about (its ids, names, image,
// ports) in at most about maxSummary bytes, each value cut at
// maxSummaryValue: enough to find the object, never the whole payload (a
// client may send megabytes, and env, annotations and auth may hold
// secrets).
func requestSummary(req any) (s string) {
	defer func() {
		if recover() != nil {
			s = ""
		}
	}()
	m, ok := req.(proto.Message)
	if !ok || m == nil {
		return ""
	}
	var b strings.Builder
	summarize(&b, m.ProtoReflect(), "", 0)
	return b.String()
}

func summarize(b *strings.Builder, m protoreflect.Message, prefix string, depth int) {
	if !m.IsValid() {
		return
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len() && b.Len() < maxSummary; i++ {
		fd := fields.Get(i)
		if !m.Has(fd) || fd.IsMap() {
			continue
		}
		name := prefix + string(fd.Name())
		switch {
		case fd.Message() != nil && !fd.IsList():
			if depth < summaryDepth {
				summarize(b, m.Get(fd).Message(), name+".", depth+1)
			}
		case summarized(string(fd.Name())):
			addSummary(b, name, summaryValue(m.Get(fd), fd))
		}
	}
}

// summarized says whether a scalar field goes into a summary: it
// identifies the object or the target of the request.
func summarized(field string) bool {
	switch field {
	case "id", "name", "namespace", "uid", "image", "attempt", "port", "runtime_handler", "timeout", "signal":
		return true
	}
	return strings.HasSuffix(field, "_id")
}

func summaryValue(v protoreflect.Value, fd protoreflect.FieldDescriptor) string {
	if fd.IsList() {
		l := v.List()
		if fd.Message() != nil {
			return fmt.Sprintf("[%d items]", l.Len())
		}
		var parts []string
		for i := 0; i < l.Len() && i < 4; i++ {
			parts = append(parts, elide(fmt.Sprint(l.Get(i).Interface()), maxSummaryValue/4))
		}
		if l.Len() > 4 {
			parts = append(parts, fmt.Sprintf("…%d more", l.Len()-4))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return elide(fmt.Sprint(v.Interface()), maxSummaryValue)
}

func addSummary(b *strings.Builder, name, value string) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	entry := name + "=" + fmt.Sprintf("%q", value)
	if room := maxSummary - b.Len(); len(entry) > room {
		entry = elide(entry, max(room, 16))
	}
	b.WriteString(entry)
}

// debugPayload is a request or response for a Debug log line: text
// protobuf, registry credentials removed, capped at maxPayload bytes.
func debugPayload(msg any) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("<%T>", msg)
		}
	}()
	m, ok := msg.(proto.Message)
	if !ok || m == nil {
		return fmt.Sprint(msg)
	}
	if p, ok := m.(*runtimeapi.PullImageRequest); ok && p.GetAuth() != nil {
		c := proto.Clone(p).(*runtimeapi.PullImageRequest)
		c.Auth = &runtimeapi.AuthConfig{Username: "<redacted>"}
		m = c
	}
	return elide(prototext.MarshalOptions{}.Format(m), maxPayload)
}
