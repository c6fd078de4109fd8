//go:build tools

// Package tools pins the kubelet the e2e suite runs against. It is its own
// module so the main module's build, vet and tests never see Kubernetes.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
