package nri

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

// createIn is a.CreateContainer with its result taken apart, as most
// tests want it.
func createIn(ctx context.Context, a *Adaptation, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	r, err := a.CreateContainer(ctx, pod, ctr)
	if err != nil {
		return nil, nil, err
	}
	return r.Adjust, r.Update, nil
}
