package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"9": syscall.SIGKILL, "TERM": syscall.SIGTERM, "SIGHUP": syscall.SIGHUP, "usr1": syscall.SIGUSR1} {
		if got, err := parseSignal(in); err != nil || got != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "99", "SIGNOPE"} {
		if _, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q) took it", in)
		}
	}
}

func TestCheckID(t *testing.T) {
	for _, id := range []string{"", ".", "..", "a/b", "a\x00"} {
		if checkID(id) == nil {
			t.Errorf("checkID(%q) took it", id)
		}
	}
	if err := checkID("0123abc"); err != nil {
		t.Error(err)
	}
}

// lxcErrors keeps the messages of liblxc's ERROR lines, not their
// source locations.
func TestLXCErrors(t *testing.T) {
	dir := t.TempDir()
	log := "lxc c1 20261128 ERROR    conf - ../src/lxc/conf.c:setup:1 - Read-only file system - Failed to setup sysctl parameters kernel.shmmni to 1000\n" +
		"lxc c1 20261128 INFO     start - ../src/lxc/start.c:x:2 - noise\n" +
		"lxc c1 20261128 ERROR    start - ../src/lxc/start.c:do_start:3 - Failed to setup container \"c1\"\n"
	if err := os.WriteFile(filepath.Join(dir, "lxc.log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "Failed to setup sysctl parameters kernel.shmmni to 1000; Failed to setup container \"c1\""
	if got := lxcErrors(dir); got != want {
		t.Errorf("lxcErrors = %q, want %q", got, want)
	}
}

// A container crin-lxc does not know is reported as runc does, which
// crind and crin-shim recognise.
func TestUnknownContainer(t *testing.T) {
	c := &cli{root: t.TempDir(), lxc: newLXC("")}
	if _, err := c.load("nope"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("load = %v", err)
	}
}
