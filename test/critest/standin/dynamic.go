package standin

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// libDirs are where the host's shared libraries are looked for; a library
// goes into the image at the path it has on the host, where the host's
// dynamic loader (copied too) looks for it.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/lib"}

// withDynamicBusybox replaces the body of bin/busybox in entries with the
// binary at path and adds its program interpreter and the shared
// libraries it names, read from the host.
func withDynamicBusybox(entries []imagetest.Entry, path string) ([]imagetest.Entry, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("busybox %s: %w", path, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("busybox %s: libraries: %w", path, err)
	}
	var files []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("busybox %s: interpreter: %w", path, err)
			}
			files = append(files, strings.TrimRight(string(b), "\x00"))
		}
	}
	for _, lib := range libs {
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
				found = filepath.Join(d, lib)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("busybox %s: %s not found in %v", path, lib, libDirs)
		}
		files = append(files, found)
	}
	for i := range entries {
		if entries[i].Name == "bin/busybox" {
			entries[i].Body = string(bin)
		}
	}
	dirs := map[string]bool{}
	for _, file := range files {
		body, err := os.ReadFile(file) // follows the library's symbolic links
		if err != nil {
			return nil, fmt.Errorf("busybox %s: %w", path, err)
		}
		rel := strings.TrimPrefix(file, "/")
		for d := filepath.Dir(rel); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		entries = append(entries, imagetest.File(rel, string(body), 0o755))
	}
	return prependDirs(entries, dirs), nil
}

// prependDirs puts a directory entry for each of dirs (parents first)
// before entries, but for those entries already have.
func prependDirs(entries []imagetest.Entry, dirs map[string]bool) []imagetest.Entry {
	for _, e := range entries {
		delete(dirs, strings.TrimSuffix(e.Name, "/"))
	}
	var out []imagetest.Entry
	for len(dirs) > 0 {
		for d := range dirs {
			if !dirs[filepath.Dir(d)] {
				out = append(out, imagetest.Dir(d, 0o755))
				delete(dirs, d)
			}
		}
	}
	return append(out, entries...)
}
