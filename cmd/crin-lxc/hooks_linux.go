package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// hookError is the file a failed prestart or createRuntime hook leaves
// its error in, for start to report.
const hookError = "hook-error"

// runHooks runs hooks in order, each with the container's state on its
// stdin and its own timeout; the first failure ends it.
func runHooks(kind string, hooks []specs.Hook, st specs.State) error {
	state, err := json.Marshal(st)
	if err != nil {
		return err
	}
	for i, h := range hooks {
		ctx := context.Background()
		if h.Timeout != nil && *h.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(*h.Timeout)*time.Second)
			defer cancel()
		}
		cmd := exec.CommandContext(ctx, h.Path)
		if len(h.Args) > 0 {
			cmd.Args = h.Args
		}
		cmd.Env = h.Env
		cmd.Stdin = bytes.NewReader(state)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s hook %d (%s): %w: %s", kind, i, h.Path, err, bytes.TrimSpace(out.Bytes()))
		}
	}
	return nil
}

// hookState is the state a hook of container id gets.
func hookState(id, bundle string, status specs.ContainerState, pid int, spec *specs.Spec) specs.State {
	return specs.State{Version: specs.Version, ID: id, Status: status, Pid: pid, Bundle: bundle, Annotations: spec.Annotations}
}

// startHostHooks is "crin-lxc __hooks <dir>", liblxc's start-host hook
// (it appends the container's name, "lxc" and "start-host"): the spec's
// prestart and createRuntime hooks, with the init's pid from LXC_PID.
func (c *cli) startHostHooks(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("__hooks: no dir")
	}
	dir := args[0]
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return err
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	spec, _, err := readBundle(st.Bundle)
	if err != nil {
		return err
	}
	pid, _ := strconv.Atoi(os.Getenv("LXC_PID"))
	state := hookState(st.ID, st.Bundle, specs.StateCreated, pid, spec)
	err = runHooks("prestart", spec.Hooks.Prestart, state) //nolint:staticcheck // NRI plugins still add prestart hooks
	if err == nil {
		err = runHooks("createRuntime", spec.Hooks.CreateRuntime, state)
	}
	if err != nil {
		_ = os.WriteFile(filepath.Join(dir, hookError), []byte(err.Error()), 0o600)
	}
	return err
}

// postHooks runs the spec's poststart or poststop hooks of a container;
// their failure is logged only, as the runtime spec says.
func (c *cli) postHooks(st *stateFile, kind string, status specs.ContainerState, pid int) {
	spec, _, err := readBundle(st.Bundle)
	if err != nil || spec.Hooks == nil {
		return
	}
	hooks := spec.Hooks.Poststart
	if kind == "poststop" {
		hooks = spec.Hooks.Poststop
	}
	if err := runHooks(kind, hooks, hookState(st.ID, st.Bundle, status, pid, spec)); err != nil {
		c.warnf("%v", err)
	}
}
