//go:build cgo

package main

/*
#cgo pkg-config: lxc
#include <stdlib.h>
#include "crin_lxc.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// liblxc is the container API, linked.
type liblxc struct{ lxcpath string }

func newLXC(lxcpath string) lxcAPI { return liblxc{lxcpath: lxcpath} }

// cstrings is a NULL-terminated C array of copies of ss.
func cstrings(ss []string) (**C.char, func()) {
	arr := C.malloc(C.size_t(len(ss)+1) * C.size_t(unsafe.Sizeof(uintptr(0))))
	view := unsafe.Slice((**C.char)(arr), len(ss)+1)
	for i, s := range ss {
		view[i] = C.CString(s)
	}
	view[len(ss)] = nil
	return (**C.char)(arr), func() {
		for i := range ss {
			C.free(unsafe.Pointer(view[i]))
		}
		C.free(arr)
	}
}

func (l liblxc) names(id string) (*C.char, *C.char, func()) {
	p, n := C.CString(l.lxcpath), C.CString(id)
	return p, n, func() { C.free(unsafe.Pointer(p)); C.free(unsafe.Pointer(n)) }
}

func (l liblxc) Check(id string) error {
	p, n, free := l.names(id)
	defer free()
	if C.crin_check(p, n) != 0 {
		return errors.New("liblxc did not load the container's config")
	}
	return nil
}

func (l liblxc) InitPid(id string) int {
	p, n, free := l.names(id)
	defer free()
	return int(C.crin_init_pid(p, n))
}

func (l liblxc) State(id string) (string, error) {
	p, n, free := l.names(id)
	defer free()
	buf := make([]byte, 64)
	if C.crin_state(p, n, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) != 0 {
		return "", errNotExist
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
}

func (l liblxc) Freeze(id string, on bool) error {
	p, n, free := l.names(id)
	defer free()
	v := C.int(0)
	if on {
		v = 1
	}
	if C.crin_freeze(p, n, v) != 0 {
		return errors.New("liblxc could not change the container's freezer state")
	}
	return nil
}

func (l liblxc) Attach(id string, a attachOptions) (int, error) {
	p, n, free := l.names(id)
	defer free()
	cargv, freeArgv := cstrings(a.Args)
	defer freeArgv()
	cenv, freeEnv := cstrings(a.Env)
	defer freeEnv()
	cwd := C.CString(a.Cwd)
	defer C.free(unsafe.Pointer(cwd))
	groups := make([]C.gid_t, len(a.Groups)+1)
	for i, g := range a.Groups {
		groups[i] = C.gid_t(g)
	}
	nnp := C.int(0)
	if a.NoNewPrivs {
		nnp = 1
	}
	var pid C.pid_t
	ret, errno := C.crin_attach(p, n, cargv, cenv, cwd, C.int(a.UID), C.int(a.GID), &groups[0], C.size_t(len(a.Groups)), nnp, &pid)
	if ret != 0 {
		return 0, fmt.Errorf("liblxc attach: %w", errno)
	}
	return int(pid), nil
}
