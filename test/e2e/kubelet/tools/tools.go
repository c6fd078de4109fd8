//go:build tools

// Package tools pins what the e2e suite runs beside crind: the kubelet,
// and kube-apiserver and etcd for the tests that need an API server. It
// is its own module so the main module's build, vet and tests never see
// Kubernetes.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
