package cni

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// defaultHostLocalDir is host-local's dataDir when its config names none.
const defaultHostLocalDir = "/var/lib/cni/networks"

// SweepIPAM releases the IP reservations of pods that owned says are gone
// (it is given a sandbox id): each attachment in crind's libcni cache whose
// pod is gone gets a CNI DEL with its cached config and arguments, which
// releases its IP the way the plugins allocated it; then, for the current
// network's host-local IPAM, a reservation file whose container id names
// no pod and that the DEL did not release is removed (its pod's cache
// entry was lost). The dataDir is assumed to be crind's alone, as it is
// any one runtime's. It returns the number of reservations released; the
// error joins what could not be released.
func (m *Manager) SweepIPAM(ctx context.Context, owned func(podID string) bool) (int, error) {
	var errs []error
	released := 0
	atts, err := m.cni.GetCachedAttachments("")
	if err != nil {
		errs = append(errs, fmt.Errorf("read cni cache: %w", err))
	}
	for _, a := range atts {
		if owned(a.ContainerID) {
			continue
		}
		list, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil || len(list.Plugins) == 0 {
			continue
		}
		rt := &libcni.RuntimeConf{
			ContainerID: a.ContainerID, IfName: a.IfName,
			Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs,
		}
		if err := m.cni.DelNetworkList(ctx, list, rt); err != nil {
			errs = append(errs, fmt.Errorf("cni del orphaned pod %s network %q: %w", a.ContainerID, list.Name, err))
			continue
		}
		m.log.InfoContext(ctx, "released the network of a pod no record owns", "pod_id", a.ContainerID, "network", list.Name)
		released++
	}

	list, _, err := m.current()
	if err != nil {
		return released, errors.Join(errs...)
	}
	for _, dir := range hostLocalDirs(list) {
		n, err := sweepHostLocal(dir, owned)
		released += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return released, errors.Join(errs...)
}

// hostLocalDirs lists the reservation directories of the host-local IPAM
// plugins in list.
func hostLocalDirs(list *libcni.NetworkConfigList) []string {
	var dirs []string
	for _, p := range list.Plugins {
		var conf struct {
			IPAM struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil || conf.IPAM.Type != "host-local" {
			continue
		}
		base := conf.IPAM.DataDir
		if base == "" {
			base = defaultHostLocalDir
		}
		dirs = append(dirs, filepath.Join(base, list.Name))
	}
	return dirs
}

// sweepHostLocal removes host-local reservation files (named by the IP,
// holding the container id on the first line) whose id no pod owns.
func sweepHostLocal(dir string, owned func(string) bool) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list ipam reservations: %w", err)
	}
	var errs []error
	n := 0
	for _, e := range ents {
		if e.IsDir() || net.ParseIP(e.Name()) == nil {
			continue // lock, last_reserved_ip.N
		}
		p := filepath.Join(dir, e.Name())
		id, err := reservationOwner(p)
		if err != nil || id == "" || owned(id) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("release ip %s of %s: %w", e.Name(), id, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func reservationOwner(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return "", sc.Err()
	}
	return strings.TrimSpace(sc.Text()), nil
}
