// Command crin-shim supervises one container for crind. See package
// github.com/crin-dev/crin/internal/runtime/shim for what it does; crind's
// oci backend is its only caller.
package main

import (
	"context"
	"os"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

func main() {
	// The shim lives until crind tells it to quit over its socket, not
	// until a signal: its root context is never cancelled.
	os.Exit(shim.Main(context.Background(), os.Args[1:]))
}
