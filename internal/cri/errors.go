package cri

import (
	"time"

	"github.com/containerd/errdefs"
)

// errInvalid classifies bad input; messages name the field and the value.
var errInvalid = errdefs.ErrInvalidArgument

func nowNano() int64 { return time.Now().UnixNano() }
