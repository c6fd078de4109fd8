package shim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ReadOOMKills returns the oom_kill counter in file, a memory cgroup's
// memory.oom_control (v1) or memory.events (v2): how many of its processes
// the kernel's OOM killer took. crin-shim and the shimv2 backend both read
// it to tell an OOM kill.
func ReadOOMKills(file string) (uint64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no oom_kill counter in %s", file)
}
