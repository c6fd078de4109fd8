package cri

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
)

// objects are the pods and containers crind shows, and the rules by which
// an RPC finds one by id: a read may name a unique prefix, a change needs
// the full id, and a stop or remove of what is gone succeeds
// (docs/errors.md, "Ids"). The hub embeds it.
type objects struct {
	// mu guards the maps below (not the objects) and closed. It is never
	// held across a call into another component.
	mu         sync.RWMutex
	sandboxes  map[string]*sandbox
	containers map[string]*container
	// pendingPods and pendingCtrs are the NRI views of pods and containers
	// whose RunPodSandbox / CreateContainer event is in progress or just
	// done but that are not visible yet: Snapshot must include them.
	pendingPods map[string]*api.PodSandbox
	pendingCtrs map[string]*api.Container
	// closed is set by Close; no owned goroutine starts after it.
	closed bool
}

// knownID reports whether a pod or container with id is visible.
func (o *objects) knownID(id string) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	_, sb := o.sandboxes[id]
	_, c := o.containers[id]
	return sb || c
}

// getSandbox finds a visible pod by id or unique id prefix, for the RPCs
// that only read (status, stats): crictl passes what its user typed.
func (o *objects) getSandbox(id string) (*sandbox, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return byPrefix(o.sandboxes, "pod_sandbox_id", "pod sandbox", id)
}

// byPrefix finds id, or the one key it is a prefix of, in held (the map
// of pods or containers, its lock held). An empty or ambiguous id is
// InvalidArgument, one that matches nothing NotFound; field and what name
// them in the error.
func byPrefix[V any](held map[string]V, field, what, id string) (V, error) {
	var found V
	if id == "" {
		return found, fmt.Errorf("%s: must not be empty: %w", field, errdefs.ErrInvalidArgument)
	}
	if v, ok := held[id]; ok {
		return v, nil
	}
	n := 0
	for k, v := range held {
		if strings.HasPrefix(k, id) {
			if n++; n > 1 {
				var zero V
				return zero, fmt.Errorf("%s %q: ambiguous prefix: %w", field, id, errdefs.ErrInvalidArgument)
			}
			found = v
		}
	}
	if n == 0 {
		return found, fmt.Errorf("%s %q: %w", what, id, errdefs.ErrNotFound)
	}
	return found, nil
}

// idLen is the length of the ids crind makes (newID): 32 random bytes in
// lowercase hex.
const idLen = 64

// isFullID says whether id has the form of an id crind makes.
func isFullID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// checkExactID refuses, for the RPCs that change, destroy or give access
// to a pod or container, an id that is not one crind could have made: a
// prefix must never act on whatever it happens to match (docs/errors.md,
// "Ids"). An id held in the maps is taken as is, whatever its form.
func checkExactID(field, id string) error {
	if id == "" {
		return fmt.Errorf("%s: must not be empty: %w", field, errdefs.ErrInvalidArgument)
	}
	if !isFullID(id) {
		return fmt.Errorf("%s %q: must be a full %d-character id: this call does not resolve id prefixes: %w", field, id, idLen, errdefs.ErrInvalidArgument)
	}
	return nil
}

// getSandboxExact finds a visible pod by its full id, for the RPCs that
// change or destroy it. An id of the right form that matches nothing is
// NotFound; anything else that matches nothing is InvalidArgument.
func (o *objects) getSandboxExact(id string) (*sandbox, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return exact(o.sandboxes, "pod_sandbox_id", "pod sandbox", id)
}

// exact finds id in held (the map of pods or containers, its lock held):
// getSandboxExact's rule.
func exact[V any](held map[string]V, field, what, id string) (V, error) {
	v, ok := held[id]
	if ok {
		return v, nil
	}
	if err := checkExactID(field, id); err != nil {
		return v, err
	}
	return v, fmt.Errorf("%s %q: %w", what, id, errdefs.ErrNotFound)
}

// sandboxGone reports whether err, from getSandboxExact(id), means that
// id names no pod, for the calls the CRI makes idempotent
// (StopPodSandbox, RemovePodSandbox: "must not return an error if ...
// already been removed"). That is NotFound, and also an id not of crind's
// form that is no prefix of a pod crind holds: critest stops and removes
// a UUID. A prefix of a live pod stays refused, neither acted on nor
// reported as done (docs/errors.md, "Ids").
func (o *objects) sandboxGone(id string, err error) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return namesNothing(o.sandboxes, id, err)
}

// containerGone is sandboxGone for StopContainer and RemoveContainer.
func (o *objects) containerGone(id string, err error) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return namesNothing(o.containers, id, err)
}

// namesNothing is sandboxGone's test against the map of pods or
// containers (its lock held).
func namesNothing[V any](held map[string]V, id string, err error) bool {
	if errors.Is(err, errdefs.ErrNotFound) {
		return true
	}
	if id == "" || !errors.Is(err, errdefs.ErrInvalidArgument) {
		return false
	}
	for k := range held {
		if strings.HasPrefix(k, id) {
			return false
		}
	}
	return true
}

// getContainerExact is getSandboxExact for containers.
func (o *objects) getContainerExact(id string) (*container, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return exact(o.containers, "container_id", "container", id)
}

// getContainer finds a visible container by id or unique id prefix.
func (o *objects) getContainer(id string) (*container, error) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return byPrefix(o.containers, "container_id", "container", id)
}

// podContainers returns the containers of a pod.
func (o *objects) podContainers(podID string) []*container {
	o.mu.RLock()
	defer o.mu.RUnlock()
	var out []*container
	for _, c := range o.containers {
		if c.rec.SandboxID == podID {
			out = append(out, c)
		}
	}
	return out
}

// allContainers snapshots the visible containers.
func (o *objects) allContainers() []*container {
	o.mu.RLock()
	defer o.mu.RUnlock()
	out := make([]*container, 0, len(o.containers))
	for _, c := range o.containers {
		out = append(out, c)
	}
	return out
}

// allSandboxes snapshots the visible pods.
func (o *objects) allSandboxes() []*sandbox {
	o.mu.RLock()
	defer o.mu.RUnlock()
	out := make([]*sandbox, 0, len(o.sandboxes))
	for _, sb := range o.sandboxes {
		out = append(out, sb)
	}
	return out
}
