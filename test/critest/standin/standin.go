// Package standin builds the images critest v1.37.0 pulls, from sources
// in this repository: busybox from Debian's busybox-static (as every crin
// test image), the web servers and the no-new-privileges checker from the
// small Go programs beside this file. critest names upstream images
// (registry.k8s.io, gcr.io, k8s.gcr.io); the suite serves each under its
// whole reference as the repository path ("127.0.0.1:port/registry.k8s.io/
// pause:3.9") of a registry on 127.0.0.1, and crind mirrors each host to
// "http://127.0.0.1:port/<host>".
//
// Each image is the busybox layer and a layer of its own holding at least
// a marker file named after it, so no two images share an id unless
// critest expects them to (test-image-tags:1, :2, :3).
package standin

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// Image is one image under the reference critest pulls it by.
type Image struct {
	Ref   string // e.g. registry.k8s.io/e2e-test-images/busybox:1.29-2
	Image v1.Image
}

// Hosts are the upstream registries the references name.
func Hosts() []string { return []string{"registry.k8s.io", "gcr.io", "k8s.gcr.io"} }

const (
	e2e     = "registry.k8s.io/e2e-test-images/"
	staging = "gcr.io/k8s-staging-cri-tools/"
)

// program is a Go program of this directory built into an image.
type program struct{ pkg, bin string }

// Build builds every stand-in image. repoRoot is the repository's root,
// where the Go programs are built (with the go command on PATH). busybox,
// when set, is the busybox binary of the images (see busyboxLayer);
// empty takes imagetest's, Debian's busybox-static.
func Build(ctx context.Context, repoRoot, busybox string) ([]Image, error) {
	dir, err := os.MkdirTemp("", "crin-standin")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bins := map[string][]byte{}
	for _, p := range []program{{"webserver", "webserver"}, {"nnp", "nnp"}} {
		out := filepath.Join(dir, p.bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./test/critest/standin/"+p.pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build %s: %w\n%s", p.pkg, err, b)
		}
		if bins[p.bin], err = os.ReadFile(out); err != nil {
			return nil, err
		}
	}
	base, err := busyboxLayer(busybox)
	if err != nil {
		return nil, err
	}
	var images []Image
	for _, s := range specs(bins) {
		img, err := s.build(base)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.refs[0], err)
		}
		for _, ref := range s.refs {
			images = append(images, Image{Ref: ref, Image: img})
		}
	}
	return images, nil
}

// busyboxLayer is imagetest's busybox with what critest's busybox 1.29
// has and Debian's busybox-static lacks, and its applets hard links, as
// in upstream busybox images: critest masks /bin/ls, and runc masking a
// symbolic link would mask busybox itself. With busybox set, that binary
// (Debian's dynamically linked busybox, whose sh runs ls through PATH as
// upstream's does, where busybox-static's runs its applet, so a masked
// /bin/ls is never run) replaces busybox-static, with the host's shared
// libraries it needs.
func busyboxLayer(busybox string) (v1.Layer, error) {
	entries, err := imagetest.BusyboxEntries()
	if err != nil {
		return nil, err
	}
	for i, e := range entries {
		if e.Type == tar.TypeSymlink && e.Linkname == "busybox" {
			entries[i] = imagetest.Hardlink(e.Name, "bin/busybox")
		}
	}
	if busybox != "" {
		if entries, err = withDynamicBusybox(entries, busybox); err != nil {
			return nil, err
		}
	}
	entries = append(entries,
		imagetest.Dir("var/run", 0o755),
		imagetest.File("bin/pgrep", pgrepScript, 0o755),
		imagetest.File("bin/ipcs", ipcsScript, 0o755),
	)
	raw, err := imagetest.TarBytes(entries...)
	if err != nil {
		return nil, err
	}
	return imagetest.LayerFromTar(raw)
}

// pgrepScript stands in for busybox's pgrep (critest: "pgrep sleep"):
// the pids whose command name contains the pattern.
const pgrepScript = `#!/bin/sh
found=1
for d in /proc/[0-9]*; do
	comm=$(cat "$d/comm" 2>/dev/null) || continue
	case "$comm" in *"$1"*) echo "${d#/proc/}"; found=0 ;; esac
done
exit $found
`

// ipcsScript stands in for busybox's ipcs -m (critest looks for a shared
// memory segment's id in its output): the System V shared memory
// segments of the container's IPC namespace.
const ipcsScript = `#!/bin/sh
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch"
tail -n +2 /proc/sysvipc/shm | while read -r key shmid perms size cpid lpid nattch uid rest; do
	echo "$key $shmid $uid $perms $size $nattch"
done
`

// spec is one image and every reference it is served under.
type spec struct {
	refs    []string
	entries []imagetest.Entry // the image's own layer, beside its marker
	cfg     func(*v1.Config)
}

func (s spec) build(base v1.Layer) (v1.Image, error) {
	marker := strings.NewReplacer("/", "_", ":", "_").Replace(s.refs[0])
	entries := append([]imagetest.Entry{imagetest.File(marker, s.refs[0]+"\n", 0o644)}, s.entries...)
	raw, err := imagetest.TarBytes(entries...)
	if err != nil {
		return nil, err
	}
	own, err := imagetest.LayerFromTar(raw)
	if err != nil {
		return nil, err
	}
	cfg := imagetest.BusyboxConfig()
	if s.cfg != nil {
		s.cfg(&cfg)
	}
	return imagetest.NewImage(cfg, base, own)
}

// user sets the image's USER.
func user(u string) func(*v1.Config) { return func(c *v1.Config) { c.User = u } }

// cmd sets the image's CMD.
func cmd(args ...string) func(*v1.Config) { return func(c *v1.Config) { c.Cmd = args } }

// specs are the images critest v1.37.0 pulls (pkg/framework and
// pkg/validate name them), but for test-image-digest, whose fixed upstream
// digest no local build can match.
func specs(bins map[string][]byte) []spec {
	web := func(path string) imagetest.Entry {
		return imagetest.Entry{Name: path, Mode: 0o755, Body: string(bins["webserver"])}
	}
	return []spec{
		{refs: []string{e2e + "busybox:1.29-2"}},
		{
			refs:    []string{e2e + "nginx:1.14-2"},
			entries: []imagetest.Entry{imagetest.Dir("usr/sbin", 0o755), web("usr/sbin/nginx")},
			cfg:     cmd("/usr/sbin/nginx", "-port", "80", "-pidfile", "/var/run/nginx.pid", "-title", "master process"),
		},
		{
			refs: []string{e2e + "httpd:2.4.39-4"},
			entries: []imagetest.Entry{
				imagetest.Dir("usr/local", 0o755), imagetest.Dir("usr/local/apache2", 0o755),
				imagetest.Dir("usr/local/apache2/bin", 0o755), web("usr/local/apache2/bin/httpd"),
			},
			cfg: cmd("/usr/local/apache2/bin/httpd", "-port", "80"),
		},
		{
			refs: []string{e2e + "nonewprivs:1.3"},
			entries: []imagetest.Entry{
				imagetest.Dir("usr/local", 0o755), imagetest.Dir("usr/local/bin", 0o755),
				{Name: "usr/local/bin/nnp", Mode: 0o4755, Body: string(bins["nnp"])},
			},
			cfg: cmd("/usr/local/bin/nnp"),
		},
		{
			refs:    []string{staging + "hostnet-nginx-" + runtime.GOARCH + ":latest"},
			entries: []imagetest.Entry{imagetest.Dir("usr/sbin", 0o755), web("usr/sbin/nginx")},
			cfg:     cmd("/usr/sbin/nginx", "-port", "12003"),
		},
		{refs: []string{"registry.k8s.io/pause:3.9", "k8s.gcr.io/pause:3.9"}},
		{refs: []string{staging + "test-image-user-uid:latest"}, cfg: user("1002")},
		{refs: []string{staging + "test-image-user-username:latest"}, cfg: user("www-data")},
		{refs: []string{staging + "test-image-user-uid-group:latest"}, cfg: user("1003:1004")},
		{refs: []string{staging + "test-image-user-username-group:latest"}, cfg: user("www-data:1004")},
		{
			refs: []string{staging + "test-image-predefined-group:latest"},
			entries: []imagetest.Entry{
				imagetest.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"+
					"default-user:x:1000:1000::/home/default-user:/bin/sh\n"+
					"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644),
				imagetest.File("etc/group", "root:x:0:\ndefault-user:x:1000:\n"+
					"group-defined-in-image:x:50000:default-user\nnogroup:x:65534:\n", 0o644),
				{Name: "home/default-user", Type: tar.TypeDir, Mode: 0o755, UID: 1000, GID: 1000},
			},
			cfg: user("1000"),
		},
		{refs: []string{staging + "test-image-latest:latest"}},
		{refs: []string{staging + "test-image-tag:test"}},
		{refs: []string{staging + "test-image-tag:all"}},
		{refs: []string{staging + "test-image-1:latest"}},
		{refs: []string{staging + "test-image-2:latest"}},
		{refs: []string{staging + "test-image-3:latest"}},
		{refs: []string{staging + "test-image-tags:1", staging + "test-image-tags:2", staging + "test-image-tags:3"}},
	}
}
