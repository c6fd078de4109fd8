package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/crin-dev/crin/internal/headroom"
)

func open(t *testing.T) (*Store, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "crin.db")
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, p
}

func TestReserve(t *testing.T) {
	s, _ := open(t)
	if err := s.Reserve(KindSandbox, "web_default_u1_0", "id1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(KindSandbox, "web_default_u1_0", "id1"); err != nil {
		t.Errorf("re-reserving for the holder: %v", err)
	}
	err := s.Reserve(KindSandbox, "web_default_u1_0", "id2")
	var nc *NameConflictError
	if !errors.As(err, &nc) || nc.Holder != "id1" || !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("conflict = %v, want NameConflictError held by id1 and AlreadyExists", err)
	}
	// The same name in the other kind is free.
	if err := s.Reserve(KindContainer, "web_default_u1_0", "id3"); err != nil {
		t.Errorf("container kind: %v", err)
	}
	// Release by a non-holder does nothing.
	if err := s.Release(KindSandbox, "web_default_u1_0", "id2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(KindSandbox, "web_default_u1_0", "id2"); err == nil {
		t.Errorf("released by a non-holder")
	}
	if err := s.Release(KindSandbox, "web_default_u1_0", "id1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(KindSandbox, "web_default_u1_0", "id2"); err != nil {
		t.Errorf("after release: %v", err)
	}
	res, err := s.Reservations(KindSandbox)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"web_default_u1_0": "id2"}, res); diff != "" {
		t.Errorf("reservations (-want +got):\n%s", diff)
	}
}

func TestRecordsSurviveReopen(t *testing.T) {
	s, p := open(t)
	sb := &Sandbox{ID: "p1", Name: "n", State: SandboxReady, Config: []byte{1, 2, 3}, IPs: []string{"10.0.0.2"}, CreatedAt: 42,
		NRILinux: []byte{4, 5}, NRIStopDelivered: true}
	c := &Container{ID: "c1", SandboxID: "p1", State: ContainerRunning, ExitCode: 3, Annotations: map[string]string{"a": "b"},
		ImageDigest: "sha256:abc", Spec: []byte(`{"ociVersion":"1.2.0","process":{"args":["sh"]}}`),
		NRIOwners: map[string]string{"memory limit": "10-res", `env "FOO"`: "20-env"}, NRIStopDelivered: true,
		Evicting: true, EvictMessage: "too hungry"}
	if err := s.PutSandbox(sb); err != nil {
		t.Fatal(err)
	}
	if err := s.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	if err := s.PutContainer(&Container{ID: "c2", SandboxID: "p1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContainer("c2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContainer("never"); err != nil {
		t.Errorf("deleting a missing record: %v", err)
	}
	s.Close()
	s2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	sbs, err := s2.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*Sandbox{sb}, sbs); diff != "" {
		t.Errorf("sandboxes (-want +got):\n%s", diff)
	}
	cs, err := s2.Containers()
	if err != nil {
		t.Fatal(err)
	}
	spec := c.Spec
	c.Spec = nil // stored apart, see TestSpecWrittenOnce
	if diff := cmp.Diff([]*Container{c}, cs); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	if got, err := s2.ContainerSpec("c1"); err != nil || string(got) != string(spec) {
		t.Errorf("spec of c1 = %s, %v; want %s", got, err, spec)
	}
}

// TestSpecWrittenOnce: a container's spec is stored by the put that
// carries it, survives the rewrites of its record that do not, and goes
// with the record; a record from before the specs bucket keeps its own.
func TestSpecWrittenOnce(t *testing.T) {
	s, _ := open(t)
	spec := []byte(`{"ociVersion":"1.2.0"}`)
	c := &Container{ID: "c1", State: ContainerCreated, Spec: spec}
	if err := s.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	if c.Spec == nil {
		t.Error("PutContainer cleared the caller's Spec")
	}
	c.Spec, c.State = nil, ContainerRunning
	if err := s.PutContainer(c); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ContainerSpec("c1"); err != nil || string(got) != string(spec) {
		t.Errorf("spec after a rewrite = %s, %v; want %s", got, err, spec)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketContainers).Get([]byte("c1")); strings.Contains(string(v), "ociVersion") {
			t.Errorf("the record carries the spec: %s", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContainer("c1"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ContainerSpec("c1"); err != nil || got != nil {
		t.Errorf("spec after delete = %s, %v; want none", got, err)
	}

	legacy := []byte(`{"id":"old","state":"running","spec":{"ociVersion":"1.0.2"}}`)
	err = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketContainers).Put([]byte("old"), legacy) })
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Containers()
	if err != nil || len(cs) != 1 || string(cs[0].Spec) != `{"ociVersion":"1.0.2"}` {
		t.Errorf("legacy record read as %+v, %v; want its own spec", cs, err)
	}
}

// TestReserveAndPut: the name and the record go in together, and a name
// conflict writes neither.
func TestReserveAndPut(t *testing.T) {
	s, _ := open(t)
	if err := s.ReserveSandbox(&Sandbox{ID: "p1", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveContainer(&Container{ID: "c1", Name: "app", Spec: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var conflict *NameConflictError
	if err := s.ReserveSandbox(&Sandbox{ID: "p2", Name: "web"}); !errors.As(err, &conflict) || conflict.Holder != "p1" {
		t.Errorf("second pod named web: %v, want a conflict with p1", err)
	}
	if err := s.ReserveContainer(&Container{ID: "c2", Name: "app"}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second container named app: %v, want AlreadyExists", err)
	}
	sbs, _ := s.Sandboxes()
	cs, _ := s.Containers()
	if len(sbs) != 1 || sbs[0].ID != "p1" || len(cs) != 1 || cs[0].ID != "c1" {
		t.Errorf("records after the conflicts: %d pods, %d containers; want p1 and c1 only", len(sbs), len(cs))
	}
	if spec, _ := s.ContainerSpec("c1"); string(spec) != "{}" {
		t.Errorf("spec of c1 = %q, want {}", spec)
	}
	// And they go together.
	if err := s.RemoveContainer("c1", "app"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveSandbox("p1", "web"); err != nil {
		t.Fatal(err)
	}
	sbs, _ = s.Sandboxes()
	cs, _ = s.Containers()
	spec, _ := s.ContainerSpec("c1")
	for _, k := range []Kind{KindSandbox, KindContainer} {
		if res, _ := s.Reservations(k); len(res) != 0 {
			t.Errorf("%s reservations left: %v", k, res)
		}
	}
	if len(sbs)+len(cs) != 0 || spec != nil {
		t.Errorf("left after removal: %d pods, %d containers, spec %q", len(sbs), len(cs), spec)
	}
}

// TestStoreKeepsRoom: the database keeps headroom.DefaultRoom allocated
// past its end, after Open and after a commit that grew it.
func TestStoreKeepsRoom(t *testing.T) {
	s, p := open(t)
	check := func(when string) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Blocks * 512; got < st.Size+headroom.DefaultRoom {
			t.Errorf("%s: %d bytes allocated for a %d-byte file, want at least %d more", when, got, st.Size, headroom.DefaultRoom)
		}
	}
	check("after Open")
	big := strings.Repeat("x", 1<<20)
	for i := range 4 {
		if err := s.PutSandbox(&Sandbox{ID: fmt.Sprint("p", i), Name: big}); err != nil {
			t.Fatal(err)
		}
	}
	check("after the file grew")
}
