// Command crin-logger writes the output of one container of a shimv2
// runtime handler to its CRI log. The shim starts it (see package
// internal/runtime/shimv2/logger); it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/crin-dev/crin/internal/runtime/shimv2/logger"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != logger.DirFlag {
		fmt.Fprintf(os.Stderr, "usage: crin-logger %s <bundle dir> (started by a shim v2 runtime)\n", logger.DirFlag)
		os.Exit(2)
	}
	if err := logger.Run(os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "crin-logger:", err)
		os.Exit(1)
	}
}
