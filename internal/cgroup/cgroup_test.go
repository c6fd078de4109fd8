package cgroup

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestDir(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/kubepods/burstable/pod1", "/kubepods/burstable/pod1"},
		{"/kubepods/burstable/pod1/abc", "/kubepods/burstable/pod1/abc"},
		{"kubepods-burstable-pod1.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"},
		{"kubepods.slice", "/kubepods.slice"},
		{"-.slice", "/"},
		{"kubepods-pod1.slice:crin:abc", "/kubepods.slice/kubepods-pod1.slice/crin-abc.scope"},
		{"crin-podff.slice:crin:ee", "/crin.slice/crin-podff.slice/crin-ee.scope"},
		{":crin:ee", "/system.slice/crin-ee.scope"},
		{"a.slice:crin:b.slice", "/a.slice/b.slice"},
		{"kubepods-burstable-pod1_2_3.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2_3.slice"},
	} {
		if got := Dir(tc.in); got != tc.want {
			t.Errorf("Dir(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestUnitAndContainer(t *testing.T) {
	if got := Container("kubepods-pod1.slice", "abc"); got != "kubepods-pod1.slice:crin:abc" {
		t.Errorf("Container(slice) = %q", got)
	}
	if got := Container("/kubepods/pod1", "abc"); got != "/kubepods/pod1/abc" {
		t.Errorf("Container(path) = %q", got)
	}
	for in, want := range map[string]string{
		"kubepods-pod1.slice":          "kubepods-pod1.slice",
		"kubepods-pod1.slice:crin:abc": "crin-abc.scope",
		"/kubepods/pod1/abc":           "",
	} {
		if got := Unit(in); got != want {
			t.Errorf("Unit(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckParent(t *testing.T) {
	fs := Layout{Driver: Cgroupfs, Parent: "/crin"}
	sd := Layout{Driver: Systemd, Parent: "crin.slice"}
	for _, tc := range []struct {
		name string
		l    Layout
		in   string
		bad  string // a part of the error; "" when accepted
	}{
		{"cgroupfs path", fs, "/kubepods/burstable/pod1", ""},
		{"cgroupfs climbs out", fs, "/../../../../tmp/x", "clean path"},
		{"cgroupfs dot-dot inside", fs, "/kubepods/../x", "clean path"},
		{"cgroupfs relative", fs, "kubepods", "absolute"},
		{"cgroupfs root", fs, "/", "root"},
		{"cgroupfs trailing slash", fs, "/kubepods/", "clean path"},
		{"cgroupfs given a slice", fs, "kubepods-pod1.slice", "absolute"},
		{"systemd slice", sd, "kubepods-burstable-pod1_2.slice", ""},
		{"systemd given a cgroupfs path", sd, "/kubepods/burstable/pod1", "must end in .slice"},
		{"systemd slice path, as kubelet sends", sd, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice", ""},
		{"systemd slice path elsewhere", sd, "/other.slice/kubepods-burstable-pod1.slice", "not the path systemd gives"},
		{"systemd slice path climbing", sd, "/kubepods.slice/../kubepods-pod1.slice", "clean path"},
		{"systemd double dash", sd, "kubepods--pod1.slice", "dashes"},
		{"systemd leading dash", sd, "-kubepods.slice", "dashes"},
		{"systemd relative path", sd, "a/b.slice", "absolute"},
		{"systemd bad byte", sd, "kube pods.slice", "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.CheckParent("config.linux.cgroup_parent", tc.in)
			if tc.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.bad) ||
				!strings.Contains(err.Error(), "config.linux.cgroup_parent") || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("error %v, want InvalidArgument naming the field and %q and saying %q", err, tc.in, tc.bad)
			}
		})
	}
}

func TestOwnParents(t *testing.T) {
	sd := Layout{Driver: Systemd, Parent: "crin.slice"}
	p := sd.OwnPodParent("ff00")
	if p != "crin-podff00.slice" || Dir(p) != "/crin.slice/crin-podff00.slice" {
		t.Fatalf("systemd own parent %q (dir %q)", p, Dir(p))
	}
	if id, ok := sd.PodOf("crin-podff00.slice"); !ok || id != "ff00" {
		t.Errorf("PodOf = %q %v", id, ok)
	}
	if _, ok := sd.PodOf("other.slice"); ok {
		t.Error("PodOf took a slice crind did not make")
	}
	if id, ok := sd.ContainerOf("crin-ee.scope"); !ok || id != "ee" {
		t.Errorf("ContainerOf = %q %v", id, ok)
	}
	fs := Layout{Driver: Cgroupfs, Parent: "/crin"}
	if p := fs.OwnPodParent("ff00"); p != "/crin/ff00" {
		t.Errorf("cgroupfs own parent %q", p)
	}
	if fs.PodParent("/kubepods/x", "ff") != "/kubepods/x" || fs.PodParent("", "ff") != "/crin/ff" {
		t.Error("PodParent ignores or invents the given parent")
	}
	if p := sd.PodParent("/kubepods.slice/kubepods-pod1.slice", "ff"); p != "kubepods-pod1.slice" {
		t.Errorf("systemd PodParent of a slice path = %q, want the slice's name", p)
	}
}

func TestParseDriver(t *testing.T) {
	for _, ok := range []string{"systemd", "cgroupfs"} {
		if _, err := ParseDriver(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if _, err := ParseDriver("Systemd"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Systemd: %v", err)
	}
}
