package nri

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

// defaultValidator runs the built-in validation rules as a plugin that is
// always ready and only takes ValidateContainerAdjustment.
type defaultValidator struct {
	cfg DefaultValidatorConfig
}

func newDefaultValidator(a *Adaptation, cfg DefaultValidatorConfig) *plugin {
	p := &plugin{
		a: a, kind: KindBuiltin, log: a.log,
		builtin: &defaultValidator{cfg: cfg},
		closed:  make(chan struct{}),
		state:   StateReady,
		timeout: a.cfg.RequestTimeout,
		policy:  FailurePolicy{FailRequest: true, KeepConnected: true},
	}
	p.setIdent("", "builtin.default-validator")
	p.events.Set(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	return p
}

func (v *defaultValidator) validate(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	return defaultValidate(ctx, v.cfg, req)
}
