//go:build node

package node

import (
	"strings"
	"testing"
	"time"
)

// sharedLife bounds the shared VM's life: the whole run, less the margin
// boot keeps before the test binary's deadline.
const sharedLife = 3 * time.Hour

// shared is the VM the tests of one test binary share (Shared). Tests run
// one at a time (none is parallel), so it needs no lock.
var shared struct {
	vm     *VM
	failed bool // a test on a shared VM failed: its console log is kept
}

// Shared returns the VM this test binary's tests share, booting it on the
// first call: a boot under emulation costs 40 s idle and up to 4 minutes
// on a loaded host, and the lane's tests need no fresh guest each. The
// VM is handed on as the test leaves it, with the crind and kubelet
// services stopped (a passing test has removed its pods: each checks
// it). After a failed test the VM is powered off, so the next test boots
// a fresh one rather than inherit what broke. StopShared (TestMain)
// powers the last one off.
func Shared(t *testing.T) *VM {
	t.Helper()
	if shared.vm != nil {
		select {
		case <-shared.vm.exited:
			shared.vm.stop(true)
			shared.vm = nil
		default:
		}
	}
	if shared.vm == nil {
		vm := newVM(t)
		booted := false
		t.Cleanup(func() {
			if !booted {
				vm.cleanup()
			}
		})
		vm.boot(sharedLife)
		booted = true
		shared.vm = vm
	}
	vm := shared.vm
	vm.t = t
	t.Cleanup(func() { handBack(t, vm) })
	return vm
}

// handBack stops the services a test may have started, or, after a failed
// test, the whole VM.
func handBack(t *testing.T, vm *VM) {
	if t.Failed() {
		shared.failed = true
		t.Logf("test failed: the shared VM is powered off (serial console log kept: %s)", vm.console)
		vm.t = nil
		vm.stop(true)
		shared.vm = nil
		return
	}
	out, err := vm.RunTimeout(3*time.Minute, "systemctl disable --now kubelet crind 2>&1; systemctl reset-failed 2>&1; true")
	if err != nil {
		t.Errorf("stop the services of the shared VM: %v: %s", err, strings.TrimSpace(out))
	}
	vm.t = nil
}

// StopShared powers off the shared VM, if one is up.
func StopShared() {
	if shared.vm != nil {
		shared.vm.stop(shared.failed)
		shared.vm = nil
	}
}
