package shimv2

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// meta is what crind keeps of a container besides its bundle.
type meta struct {
	Address string `json:"address"`
	ShimPid int    `json:"shim_pid,omitempty"`
	LogPath string `json:"log_path,omitempty"`
	// LogRoot is the pod's log directory (runtime.CreateRequest.LogRoot).
	LogRoot string `json:"log_root,omitempty"`
	// LogMax, when set, is the size the logger keeps LogPath under by
	// itself: the private log of a container created without a log path,
	// kept for attach (privateLog).
	LogMax    int64     `json:"log_max,omitempty"`
	Pid       int       `json:"pid,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// OOMCounter is the cgroup file counting the container's OOM kills and
	// OOMBase its value when the container was created.
	OOMCounter string `json:"oom_counter,omitempty"`
	OOMBase    uint64 `json:"oom_base,omitempty"`
	// OOMAncestors are the counters of the cgroups above the container's
	// (cgroup v2), nearest first, with their values at create: they
	// outlive the container's cgroup (see oomKilled).
	OOMAncestors []oomCount `json:"oom_ancestors,omitempty"`
	// Stdin: the container has a stdin (stdinFifo), closed after the
	// first attach session that brings input when StdinOnce.
	Stdin     bool `json:"stdin,omitempty"`
	StdinOnce bool `json:"stdin_once,omitempty"`
}

// oomCount is one OOM kill counter file and its value at create.
type oomCount struct {
	File string `json:"file"`
	Base uint64 `json:"base"`
}

func readMeta(dir string) (meta, error) {
	var m meta
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("decode %s: %w", filepath.Join(dir, metaFile), err)
	}
	return m, nil
}

// bundleMeta is what a shim itself wrote into the bundle at start: its
// address and, when it is not a pod's shared shim, its pid.
func bundleMeta(dir string) meta {
	var m meta
	if b, err := os.ReadFile(filepath.Join(dir, "address")); err == nil {
		m.Address = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "shim.pid")); err == nil {
		m.ShimPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return m
}

func writeMeta(dir string, m meta) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+metaFile)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write meta: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, metaFile)); err != nil {
		return fmt.Errorf("write meta: %w", err)
	}
	return nil
}
