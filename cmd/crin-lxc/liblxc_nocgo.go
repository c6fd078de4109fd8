//go:build !cgo

package main

import "errors"

// errNoCgo: crin-lxc links liblxc through cgo; built without it, every
// command that needs liblxc fails with this.
var errNoCgo = errors.New("crin-lxc was built without cgo and cannot reach liblxc (build it with CGO_ENABLED=1)")

type nolxc struct{}

func newLXC(string) lxcAPI { return nolxc{} }

func (nolxc) Check(string) error                        { return errNoCgo }
func (nolxc) InitPid(string) int                        { return -1 }
func (nolxc) State(string) (string, error)              { return "", errNoCgo }
func (nolxc) Freeze(string, bool) error                 { return errNoCgo }
func (nolxc) Attach(string, attachOptions) (int, error) { return 0, errNoCgo }
