// Command crin-shim supervises one container for crind. See package
// github.com/crin-dev/crin/internal/runtime/shim for what it does; crind's
// oci backend is its only caller.
package main

import (
	"os"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

func main() {
	os.Exit(shim.Main(os.Args[1:]))
}
