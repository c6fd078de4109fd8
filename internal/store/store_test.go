package store

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
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
	if diff := cmp.Diff([]*Container{c}, cs); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
}
