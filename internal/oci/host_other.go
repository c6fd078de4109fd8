//go:build !linux

package oci

// DetectHost describes this node; off Linux there is nothing to detect.
func DetectHost() *Host { return &Host{} }
