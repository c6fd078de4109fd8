package checkpoint

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// tree describes every path under dir: type, permissions, content or
// link target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// tarHeaders lists the headers of the tar at p, in order.
func tarHeaders(t *testing.T, p string) []*tar.Header {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hdrs []*tar.Header
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, hdr)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteArchiveRoundTrip(t *testing.T) {
	staging := t.TempDir()
	created := time.Date(2026, 11, 28, 4, 5, 0, 123, time.UTC)
	cfg := ContainerConfig{
		ID: "c1", Name: "count", RootfsImage: "busybox", RootfsImageRef: "sha256:abc",
		RootfsImageName: "docker.io/library/busybox:latest", Runtime: "runc",
		CreatedTime: created, CheckpointedTime: created.Add(time.Minute),
	}
	spec := &specs.Spec{Version: "1.3.0", Hostname: "pod", Annotations: map[string]string{"io.kubernetes.cri.container-name": "count"}}
	if err := WriteConfig(staging, cfg); err != nil {
		t.Fatal(err)
	}
	if err := WriteSpec(staging, spec); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(staging, ImagesDir, InventoryFile), "criu inventory", 0o600)
	writeFile(t, filepath.Join(staging, ImagesDir, DescriptorsFile), `["/dev/null","pipe:[1]","pipe:[2]"]`, 0o644)
	writeFile(t, filepath.Join(staging, DumpLogFile), "dump log\n", 0o640)
	if err := os.Mkdir(filepath.Join(staging, ImagesDir, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ImagesDir+"/"+InventoryFile, filepath.Join(staging, "inventory")); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	dst := filepath.Join(out, "checkpoint-count_default-count-2026-11-28T04:05:00Z.tar")
	if err := WriteArchive(dst, staging); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("archive: %v, %v; want mode 0600", fi, err)
	}
	if got := listDir(t, out); !slices.Equal(got, []string{filepath.Base(dst)}) {
		t.Errorf("files beside the archive: %q, want only the archive", got)
	}

	var got []string
	for _, h := range tarHeaders(t, dst) {
		got = append(got, string(h.Typeflag)+" "+h.Name)
	}
	want := []string{
		"5 checkpoint/", // tar.TypeDir: checkpointctl needs this header
		"0 checkpoint/descriptors.json",
		"5 checkpoint/empty/",
		"0 checkpoint/inventory.img",
		"0 config.dump",
		"0 dump.log",
		"2 inventory",
		"0 spec.dump",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("archive entries (-want +got):\n%s", diff)
	}

	dir := t.TempDir()
	if err := Extract(dst, dir, 1<<20); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tree(t, staging), tree(t, dir)); diff != "" {
		t.Errorf("extracted tree (-staged +extracted):\n%s", diff)
	}
	gotCfg, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg, gotCfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	gotSpec, err := ReadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec, gotSpec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
}

// TestWriteArchiveIsAtomic checks that a staging dir WriteArchive cannot
// take leaves no file behind and an earlier archive as it was.
func TestWriteArchiveIsAtomic(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing bool
	}{
		{"new archive", false},
		{"archive exists", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			staging := t.TempDir()
			writeFile(t, filepath.Join(staging, ConfigDumpFile), "{}", 0o600)
			if err := unix.Mkfifo(filepath.Join(staging, ImagesDir+"-fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			dst := filepath.Join(out, "ckpt.tar")
			if tc.existing {
				writeFile(t, dst, "earlier archive", 0o600)
			}
			err := WriteArchive(dst, staging)
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "checkpoint-fifo is a fifo") {
				t.Fatalf("WriteArchive = %v, want invalid argument naming checkpoint-fifo as a fifo", err)
			}
			var want []string
			if tc.existing {
				want = []string{"ckpt.tar"}
				if b, _ := os.ReadFile(dst); string(b) != "earlier archive" {
					t.Errorf("existing archive now holds %q", b)
				}
			}
			if got := listDir(t, out); !slices.Equal(got, want) {
				t.Errorf("files in the archive's dir: %q, want %q", got, want)
			}
		})
	}
}

func TestWriteArchiveRefusesDstInStaging(t *testing.T) {
	staging := t.TempDir()
	err := WriteArchive(filepath.Join(staging, "ckpt.tar"), staging)
	if !errdefs.IsInvalidArgument(err) {
		t.Fatalf("WriteArchive = %v, want invalid argument", err)
	}
	if got := listDir(t, staging); len(got) != 0 {
		t.Errorf("staging dir now holds %q", got)
	}
}

// ent is one entry of a hand-made tar.
type ent struct {
	name, body, link string
	typ              byte
}

func file(name, body string) ent { return ent{name: name, body: body, typ: tar.TypeReg} }

// writeTar writes entries as a tar file in dir and returns its path.
func writeTar(t *testing.T, dir string, entries ...ent) string {
	t.Helper()
	p := filepath.Join(dir, "archive.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if e.typ == tar.TypeChar {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExtractRefusesHostileArchives(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	writeFile(t, filepath.Join(outside, "secret"), "keep", 0o644)
	before := tree(t, outside)
	big := strings.Repeat("x", 4096)

	tests := []struct {
		name    string
		entries []ent
		bad     string // the entry the error must name
		check   func(error) bool
		limit   int64
	}{
		{name: "dotdot", entries: []ent{file("../outside/x", "x")}, bad: "../outside/x"},
		{name: "dotdot inside", entries: []ent{file("a/../../outside/x", "x")}, bad: "a/../../outside/x"},
		{name: "absolute", entries: []ent{file(outside+"/x", "x")}, bad: outside + "/x"},
		{name: "symlink out then file through it", entries: []ent{
			{name: "link", link: outside, typ: tar.TypeSymlink},
			file("link/secret", "pwned"),
		}, bad: "link/secret"},
		{name: "symlink in then file through it", entries: []ent{
			{name: "sub/", typ: tar.TypeDir},
			{name: "link", link: "sub", typ: tar.TypeSymlink},
			file("link/x", "x"),
		}, bad: "link/x"},
		{name: "symlink then dir through it", entries: []ent{
			{name: "link", link: "../outside", typ: tar.TypeSymlink},
			{name: "link/d/", typ: tar.TypeDir},
		}, bad: "link/d/"},
		{name: "file over symlink", entries: []ent{
			{name: "link", link: outside + "/secret", typ: tar.TypeSymlink},
			file("link", "pwned"),
		}, bad: "link"},
		{name: "hard link", entries: []ent{
			file("a", "a"),
			{name: "b", link: "a", typ: tar.TypeLink},
		}, bad: "b"},
		{name: "char device", entries: []ent{{name: "null", typ: tar.TypeChar}}, bad: "null"},
		{name: "fifo", entries: []ent{{name: "p", typ: tar.TypeFifo}}, bad: "p"},
		{name: "oversize file", entries: []ent{file("ok", "x"), file("big", big)}, bad: "big", limit: 4096,
			check: func(err error) bool {
				return errdefs.IsResourceExhausted(err) && strings.Contains(err.Error(), "limit of 4096 bytes")
			}},
		{name: "too many entries", entries: []ent{file("a", ""), file("b", ""), file("c", "")}, bad: "c", limit: 1024,
			check: errdefs.IsResourceExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			archive := writeTar(t, t.TempDir(), tc.entries...)
			dir := filepath.Join(base, "x-"+strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			limit := tc.limit
			if limit == 0 {
				limit = 1 << 20
			}
			err := Extract(archive, dir, limit)
			check := tc.check
			if check == nil {
				check = errdefs.IsInvalidArgument
			}
			if err == nil || !check(err) {
				t.Fatalf("Extract = %v, want the refusal's class", err)
			}
			if !strings.Contains(err.Error(), "entry \""+tc.bad+"\"") {
				t.Errorf("error %q does not name entry %q", err, tc.bad)
			}
			if got := listDir(t, dir); len(got) != 0 {
				t.Errorf("dir holds %q after the failed extraction, want it empty", got)
			}
			if diff := cmp.Diff(before, tree(t, outside)); diff != "" {
				t.Errorf("outside dir changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestExtractRefusesBadTarget(t *testing.T) {
	archive := writeTar(t, t.TempDir(), file(ConfigDumpFile, "{}"))
	full := t.TempDir()
	writeFile(t, filepath.Join(full, "there"), "x", 0o600)
	if err := Extract(archive, full, 1<<20); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Extract into a non-empty dir = %v, want invalid argument", err)
	}
	if got := listDir(t, full); !slices.Equal(got, []string{"there"}) {
		t.Errorf("non-empty dir now holds %q", got)
	}
	if err := Extract(archive, t.TempDir(), 0); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Extract with limit 0 = %v, want invalid argument", err)
	}
}

// TestConfigDumpKeys checks config.dump against the keys checkpointctl's
// metadata.ContainerConfig decodes, and that its times, zero or not, are
// valid RFC 3339 (checkpointctl fails on anything else).
func TestConfigDumpKeys(t *testing.T) {
	now := time.Date(2026, 11, 28, 4, 5, 6, 7, time.UTC)
	tests := []struct {
		name string
		cfg  ContainerConfig
		keys []string
	}{
		{"minimal", ContainerConfig{ID: "c1", Name: "count"},
			[]string{"checkpointedTime", "createdTime", "id", "name", "restored", "restoredTime"}},
		{"full", ContainerConfig{
			ID: "c1", Name: "count", RootfsImage: "busybox", RootfsImageRef: "sha256:abc",
			RootfsImageName: "docker.io/library/busybox:latest", Runtime: "runc",
			CreatedTime: now, CheckpointedTime: now, RestoredTime: now, Restored: true,
		}, []string{
			"checkpointedTime", "createdTime", "id", "name", "restored", "restoredTime",
			"rootfsImage", "rootfsImageName", "rootfsImageRef", "runtime",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteConfig(dir, tc.cfg); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, ConfigDumpFile))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if diff := cmp.Diff(tc.keys, keys); diff != "" {
				t.Errorf("config.dump keys (-want +got):\n%s", diff)
			}
			for _, k := range []string{"createdTime", "checkpointedTime", "restoredTime"} {
				var s string
				if err := json.Unmarshal(m[k], &s); err != nil {
					t.Fatalf("%s = %s: not a string", k, m[k])
				}
				if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
					t.Errorf("%s = %q: %v", k, s, err)
				}
			}
			got, err := ReadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.cfg, got); diff != "" {
				t.Errorf("read back (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadConfig(dir); !errdefs.IsNotFound(err) {
		t.Errorf("ReadConfig of a dir without config.dump = %v, want not found", err)
	}
	writeFile(t, filepath.Join(dir, ConfigDumpFile), `{"createdTime": ""}`, 0o600)
	if _, err := ReadConfig(dir); !errdefs.IsInvalidArgument(err) {
		t.Errorf("ReadConfig of an empty time = %v, want invalid argument", err)
	}
	writeFile(t, filepath.Join(dir, SpecDumpFile), `[]`, 0o600)
	if _, err := ReadSpec(dir); !errdefs.IsInvalidArgument(err) {
		t.Errorf("ReadSpec of a JSON array = %v, want invalid argument", err)
	}
}
