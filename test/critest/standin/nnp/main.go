// Command nnp stands in for the nonewprivs image critest runs: installed
// setuid root, it prints the effective uid it runs with, which is 0 when
// the setuid bit took effect and the caller's uid under no_new_privs.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
