// Command perfpin holds one perf event bound to its own thread open for
// as long as it runs, and nothing else. The node lane runs it in the VM
// for the guest's whole life so that the kernel's perf_sched_events
// static branch stays enabled and is never patched again
// (docs/node-lane.md, "Guest kernel oopses").
package main

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	// A software "dummy" event counts nothing; bound to a task (pid 0:
	// this thread) it is accounted as a task event, and the first task
	// event enables the scheduler's perf hooks.
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_DUMMY,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		fmt.Fprintf(os.Stderr, "perfpin: perf_event_open: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("perfpin: holding task perf event fd %d\n", fd)
	for {
		time.Sleep(time.Hour)
	}
}
