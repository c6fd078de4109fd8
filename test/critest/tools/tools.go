//go:build tools

// Package tools pins cri-tools (critest, crictl) and the ginkgo CLI that
// critest's --parallel runs. It is its own module so the main module's
// build, vet and tests never see cri-tools; build.sh builds the binaries
// inside the pinned cri-tools module, from its own go.sum.
package tools

import _ "sigs.k8s.io/cri-tools/pkg/version"
