//go:build integration

package integration

import "google.golang.org/grpc/status"

// code names an error's gRPC code ("OK" for nil).
func code(err error) string { return status.Code(err).String() }
