//go:build critest

// Package critest runs cri-tools' CRI conformance suite, critest v1.37.0,
// against the real crind: the whole suite on the default handler (runc
// under crin-shim) and on the shim v2 handler (runc-v2, Debian's
// containerd-shim-runc-v2), and its NRI contract specs with -nri-socket.
// The images critest pulls are built here (package standin) and served
// from a registry on 127.0.0.1 that crind mirrors the upstream hosts to.
// A spec may be left out only by the skip list below, each with its
// reason; any other failure, and any spec that skips itself at run time,
// fails the test. It needs root and the binaries build.sh makes; run it
// with `make critest` (docs/conformance.md).
package critest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/critest/standin"
	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/testnet"
)

// skip is a spec (a part of its full text) left out of the runs, with the
// reason it cannot pass here; with handler set, only on that handler's
// run; with when set, only where when says so.
type skip struct {
	spec, reason string
	handler      string
	when         func() bool
}

// skips are the specs left out of the runs.
var skips = []skip{
	{
		spec: "public image with digest should be pulled and removed",
		reason: "pulls gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2..., a fixed " +
			"upstream digest no image built here can have (crind answers NotFound naming the mirror and the host)",
	},
	{
		spec:   "[k8s.io] AppArmor ",
		reason: "AppArmor is not enabled in this machine's kernel (no /sys/module/apparmor); the specs skip themselves",
		when:   noAppArmor,
	},
	{
		spec: "[k8s.io] Security Context bucket runtime should support MaskedPaths",
		reason: "without " + busyboxEnv + " the stand-in busybox is Debian's busybox-static, whose sh runs ls " +
			"as a built-in applet (FEATURE_SH_STANDALONE) and never executes the masked /bin/ls",
		when: func() bool { return os.Getenv(busyboxEnv) == "" },
	},
}

// Environment knobs.
const (
	// dirEnv is the dir of critest, crictl and ginkgo (build.sh's output).
	dirEnv = "CRIN_CRITEST_DIR"
	// parallelEnv is critest's --parallel (default 4).
	parallelEnv = "CRIN_CRITEST_PARALLEL"
	// busyboxEnv is the busybox binary of the stand-in images (busybox.sh
	// fetches Debian's dynamically linked one); unset: busybox-static.
	busyboxEnv = "CRIN_CRITEST_BUSYBOX"
	// focusEnv, for a developer, narrows every run to the specs its
	// regexp matches (ginkgo's focus).
	focusEnv = "CRIN_CRITEST_FOCUS"
)

// nriFocus picks the NRI contract specs ("NRI" is their Describe).
const nriFocus = `\[k8s\.io\] NRI `

// TestMain removes the binaries built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilt()
	os.Exit(code)
}

// TestCritest runs the three suites one after the other: they share the
// host ports critest's port mapping specs bind.
func TestCritest(t *testing.T) {
	bin := harness.Build(t)
	tools := critestDir(t)
	reg := serveImages(t)
	for _, r := range []run{
		{name: "runc", skip: nriFocus},
		{name: "runc-v2", handler: "runc-v2", skip: nriFocus},
		{name: "nri", focus: nriFocus, nri: true},
	} {
		t.Run(r.name, func(t *testing.T) {
			d := startCrind(t, bin, reg, r.handler)
			r.critest(t, tools, d)
		})
	}
}

// critestDir is where build.sh put the binaries.
func critestDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(dirEnv)
	if dir == "" {
		home, _ := os.UserCacheDir()
		dir = filepath.Join(home, "crin", "critest-v1.37.0")
	}
	for _, b := range []string{"critest", "ginkgo"} {
		if _, err := exec.LookPath(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%v (test/critest/build.sh builds it; %s overrides the dir)", err, dirEnv)
		}
	}
	return dir
}

// serveImages builds the stand-in images and serves them for the test's
// lifetime; it returns the registry's host:port.
func serveImages(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	images, err := standin.Build(ctx, harness.RepoRoot(), os.Getenv(busyboxEnv))
	if err != nil {
		t.Fatal(err)
	}
	host := imagetest.StartRegistry(t)
	for _, im := range images {
		if _, err := imagetest.PushImage(ctx, host, im.Ref, im.Image); err != nil {
			t.Fatal(err)
		}
	}
	return host
}

// daemon is one crind for one run.
type daemon struct {
	socket, nriSocket string
	log               *harness.LogBuffer
}

// startCrind starts a crind of its own dirs, network and NRI socket that
// mirrors every upstream host to the local registry; handler, when set,
// is configured as the shim v2 runtime of that name.
func startCrind(t *testing.T, bin, registry, handler string) *daemon {
	t.Helper()
	base, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	// The user namespace dir (<state>-userns) must be reachable by any
	// id (docs/userns.md), or crind offers no user namespaces.
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		socket:    filepath.Join(base, "s", "crin.sock"),
		nriSocket: filepath.Join(base, "nri", "nri.sock"),
		log:       &harness.LogBuffer{},
	}
	root, state := filepath.Join(base, "root"), filepath.Join(base, "s")
	n := testnet.Pick(t, "crinc", base)
	confDir := filepath.Join(base, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	portmap := `{"type": "portmap", "capabilities": {"portMappings": true}}`
	if err := os.WriteFile(filepath.Join(confDir, "10-test.conflist"), []byte(n.Conflist(portmap)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`root = %q
state = %q
[cri]
socket = %q
metrics_address = ""
stream_address = "127.0.0.1:0"
cgroup_parent = %q
shim_binary = %q
pause_binary = %q
[cni]
conf_dir = %q
bin_dirs = ["/usr/lib/cni"]
[nri]
socket_path = %q
%s%s`, root, state, d.socket, "/crincritest-"+harness.RandHex(4),
		filepath.Join(bin, "crin-shim"), filepath.Join(bin, "crin-pause"), confDir, d.nriSocket,
		mirrors(registry), shimv2Config(t, handler))
	cfgPath := filepath.Join(base, "crin.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, conn := harness.Crind{Bin: bin, Config: cfgPath, Socket: d.socket, Log: d.log, KillWithTest: true}.Start(t)
	t.Cleanup(func() {
		// critest removes what it made; whatever a failed spec left is
		// removed the way kubelet drains a node.
		harness.RemoveAllPods(t, newRuntimeClient(conn))
		harness.Stop(t, cmd, conn)
		if t.Failed() {
			t.Logf("crind log:\n%s", harness.Tail(d.log.String(), 8000))
		}
		harness.CheckNoLeaks(t, root, state)
		n.CheckNoLeaks(t)
		n.Remove(t)
		_ = syscall.Unmount(filepath.Join(state, "netns"), syscall.MNT_DETACH)
		_ = os.RemoveAll(base)
	})
	return d
}

// mirrors is the [registry] config sending every upstream host critest
// names to the local registry, under the host's name as a path.
func mirrors(registry string) string {
	var b strings.Builder
	b.WriteString("[registry]\n")
	for _, h := range standin.Hosts() {
		fmt.Fprintf(&b, "[registry.mirrors.%q]\nendpoints = [\"http://%s/%s\"]\n", h, registry, h)
	}
	return b.String()
}

// shimv2Config configures handler (when set) as Debian's
// containerd-shim-runc-v2 driving runc, as `make integration-shimv2` does.
func shimv2Config(t *testing.T, handler string) string {
	t.Helper()
	if handler == "" {
		return ""
	}
	if _, err := exec.LookPath("containerd-shim-runc-v2"); err != nil {
		t.Fatalf("containerd-shim-runc-v2 not installed (scripts/deps.sh installs Debian's containerd): %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("[runtimes.%s]\ntype = \"shimv2\"\nruntime_type = \"io.containerd.runc.v2\"\n"+
		"[runtimes.%s.options]\nbinary_name = %q\n", handler, handler, runc)
}

// run is one critest run.
type run struct {
	name    string
	handler string // critest's -runtime-handler
	focus   string // ginkgo focus regexp; empty: every spec
	skip    string // ginkgo skip regexp, besides the skip list
	nri     bool   // pass -nri-socket
}

// critest runs critest against d and checks its JSON report.
func (r run) critest(t *testing.T, tools string, d *daemon) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	args := []string{
		"-runtime-endpoint=unix://" + d.socket,
		"-image-endpoint=unix://" + d.socket,
		"-config=" + filepath.Join(t.TempDir(), "no-crictl.yaml"),
		"-parallel=" + parallel(),
		"-ginkgo.json-report=" + report,
		"-ginkgo.no-color",
		"-ginkgo.skip=" + skipRegexp(r.handler, r.skip),
	}
	if f := os.Getenv(focusEnv); f != "" {
		r.focus = f
	}
	if r.focus != "" {
		args = append(args, "-ginkgo.focus="+r.focus)
	}
	if r.handler != "" {
		args = append(args, "-runtime-handler="+r.handler)
	}
	if r.nri {
		args = append(args, "-nri-socket="+d.nriSocket)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(tools, "critest"), args...)
	cmd.Dir = t.TempDir()
	// TMPDIR: --parallel leaves a dir of its own in it.
	cmd.Env = append(os.Environ(), "PATH="+tools+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
	out := &harness.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	runErr := cmd.Run()
	specs, err := readReport(report)
	if err != nil {
		t.Fatalf("critest %s: %v (exit: %v); output:\n%s", r.name, err, runErr, harness.Tail(out.String(), 16000))
	}
	// A listed spec outside the run's focus counts as not selected.
	focus := regexp.MustCompile(r.focus)
	s := summarize(specs, func(name string) bool { return focus.MatchString(name) && listed(r.handler, name) })
	t.Logf("critest %s: %d specs, %d run: %d passed, %d failed; %d skipped by the list, %d not selected; %s",
		r.name, s.specs, s.passed+len(s.failed), s.passed, len(s.failed), s.listed, s.filtered,
		time.Since(start).Round(time.Second))
	for _, f := range s.failed {
		t.Errorf("%s", f)
	}
	if runErr != nil && len(s.failed) == 0 {
		t.Errorf("critest %s: %v, with no failed spec in its report; output:\n%s", r.name, runErr, harness.Tail(out.String(), 16000))
	}
	if t.Failed() {
		t.Logf("critest output:\n%s", harness.Tail(out.String(), 30000))
	}
}

// parallel is critest's --parallel.
func parallel() string {
	if p, err := strconv.Atoi(os.Getenv(parallelEnv)); err == nil && p > 0 {
		return strconv.Itoa(p)
	}
	return "4"
}

// noAppArmor reports whether the kernel has no AppArmor.
func noAppArmor() bool {
	_, err := os.Stat("/sys/module/apparmor/parameters/enabled")
	return err != nil
}

// activeSkips are the entries of the skip list that apply to a run on
// handler here.
func activeSkips(handler string) []skip {
	var out []skip
	for _, s := range skips {
		if (s.handler == "" || s.handler == handler) && (s.when == nil || s.when()) {
			out = append(out, s)
		}
	}
	return out
}

// skipRegexp is the ginkgo skip of the skip list on handler and extra.
func skipRegexp(handler, extra string) string {
	alts := make([]string, 0, len(skips)+1)
	for _, s := range activeSkips(handler) {
		alts = append(alts, regexp.QuoteMeta(s.spec))
	}
	if extra != "" {
		alts = append(alts, extra)
	}
	return strings.Join(alts, "|")
}

// listed reports whether the skip list names the spec on handler.
func listed(handler, name string) bool {
	for _, s := range activeSkips(handler) {
		if strings.Contains(name, s.spec) {
			return true
		}
	}
	return false
}

// newRuntimeClient is the CRI runtime client of conn.
func newRuntimeClient(conn *grpc.ClientConn) runtimeapi.RuntimeServiceClient {
	return runtimeapi.NewRuntimeServiceClient(conn)
}
