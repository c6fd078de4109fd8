// Command crin-shim supervises the containers of one pod for crind. See
// package github.com/crin-dev/crin/internal/runtime/shim/shimd for what it
// does and package shim for its protocol; crind's oci backend is its only
// caller.
package main

import (
	"context"
	"os"

	"github.com/crin-dev/crin/internal/runtime/shim/shimd"
)

func main() {
	// The shim lives until its last container is removed, not until a
	// signal: its root context is never cancelled.
	os.Exit(shimd.Main(context.Background(), os.Args[1:]))
}
