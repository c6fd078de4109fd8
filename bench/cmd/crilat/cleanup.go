package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cleanupCmd stops and removes every container and pod of the runtime. It
// is the script's first line of clean-up after a failed run, while the
// daemon still knows what it started.
func cleanupCmd(args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	socket := fs.String("socket", "", "CRI unix socket")
	timeout := fs.Duration("timeout", time.Minute, "time allowed for the whole clean-up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" {
		return errors.New("-socket is required")
	}
	c, err := dial(*socket)
	if err != nil {
		return err
	}
	defer c.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var errs []error
	cs, err := c.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, ctr := range cs.GetContainers() {
		id := ctr.GetId()
		if _, err := c.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
			errs = append(errs, fmt.Errorf("stop container %s: %w", id, err))
		}
		if _, err := c.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", id, err))
		}
	}
	ps, err := c.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list pods: %w", err))...)
	}
	for _, p := range ps.GetItems() {
		id := p.GetId()
		if _, err := c.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod %s: %w", id, err))
		}
		if _, err := c.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod %s: %w", id, err))
		}
	}
	fmt.Printf("removed %d containers and %d pods\n", len(cs.GetContainers()), len(ps.GetItems()))
	return errors.Join(errs...)
}
