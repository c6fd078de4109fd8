package cni

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
)

// fakePlugin is a CNI plugin that logs each call ("COMMAND container netns
// args") to $FAKE_CNI_LOG, keeps the last stdin per command, and answers ADD
// with two addresses on the pod's interface and one on a host interface. It
// fails ADD when its config has "fail": true (grep, as sh has no JSON).
const fakePlugin = `#!/bin/sh
stdin=$(cat)
echo "$CNI_COMMAND $CNI_CONTAINERID netns=$CNI_NETNS args=$CNI_ARGS" >> "$FAKE_CNI_LOG"
printf '%s' "$stdin" > "$FAKE_CNI_LOG.$(basename "$0").$CNI_COMMAND"
case "$CNI_COMMAND" in
ADD)
	if printf '%s' "$stdin" | grep -q '"fail":true'; then
		echo '{"cniVersion":"1.0.0","code":11,"msg":"fake failure"}'
		exit 1
	fi
	printf '{"cniVersion":"1.0.0","interfaces":[{"name":"br"},{"name":"eth0","sandbox":"%s"}],"ips":[{"address":"10.1.0.1/24","interface":0},{"address":"10.1.2.3/24","interface":1},{"address":"fd00::3/64","interface":1}]}' "$CNI_NETNS"
	;;
VERSION)
	echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'
	;;
esac
`

type fakeEnv struct {
	m       *Manager
	confDir string
	log     string
}

func newFakeEnv(t *testing.T, conflist string) *fakeEnv {
	t.Helper()
	bin := t.TempDir()
	for _, name := range []string{"fake", "fake2"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(fakePlugin), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(t.TempDir(), "calls")
	t.Setenv("FAKE_CNI_LOG", log)
	confDir := t.TempDir()
	mustWrite(t, filepath.Join(confDir, "10-fake.conflist"), conflist)
	m, err := New(Config{ConfDir: confDir, BinDirs: []string{bin}, CacheDir: t.TempDir(), PluginTimeout: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeEnv{m: m, confDir: confDir, log: log}
}

// calls returns the logged plugin calls and forgets them.
func (e *fakeEnv) calls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(e.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(e.log)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (e *fakeEnv) stdin(t *testing.T, plugin, cmd string) map[string]interface{} {
	t.Helper()
	b, err := os.ReadFile(e.log + "." + plugin + "." + cmd)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]interface{}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("plugin stdin %q: %v", b, err)
	}
	return v
}

const twoFakes = `{"cniVersion":"1.0.0","name":"fakenet","plugins":[
	{"type":"fake","capabilities":{"portMappings":true,"ipRanges":true}},
	{"type":"fake2"}]}`

const podArgs = "args=IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=pod1;K8S_POD_UID=uid1"

func TestSetupTeardown(t *testing.T) {
	e := newFakeEnv(t, twoFakes)
	ctx := context.Background()
	if err := e.m.SetPodCIDR("10.1.2.0/24"); err != nil {
		t.Fatal(err)
	}
	netns := filepath.Join(t.TempDir(), "ns") // a plain file: not a namespace
	mustWrite(t, netns, "")
	pod := Pod{ID: "pod1", Name: "web", Namespace: "ns", UID: "uid1", NetNS: netns,
		Ports: []PortMapping{{Protocol: "tcp", ContainerPort: 80, HostPort: 8080}}}

	res, err := e.m.Setup(ctx, pod)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if diff := cmp.Diff(&Result{IPs: []string{"10.1.2.3", "fd00::3"}}, res); diff != "" {
		t.Errorf("Setup result (-want +got):\n%s", diff)
	}
	want := []string{"ADD pod1 netns=" + netns + " " + podArgs, "ADD pod1 netns=" + netns + " " + podArgs}
	if diff := cmp.Diff(want, e.calls(t)); diff != "" {
		t.Errorf("ADD calls (-want +got):\n%s", diff)
	}
	// Only the plugin that declares the capabilities gets them.
	rc, _ := e.stdin(t, "fake", "ADD")["runtimeConfig"].(map[string]interface{})
	wantRC := map[string]interface{}{
		"portMappings": []interface{}{map[string]interface{}{"hostPort": 8080.0, "containerPort": 80.0, "protocol": "tcp"}},
		"ipRanges":     []interface{}{[]interface{}{map[string]interface{}{"subnet": "10.1.2.0/24"}}},
	}
	if diff := cmp.Diff(wantRC, rc); diff != "" {
		t.Errorf("runtimeConfig of fake (-want +got):\n%s", diff)
	}
	if rc2, ok := e.stdin(t, "fake2", "ADD")["runtimeConfig"]; ok {
		t.Errorf("fake2 got runtimeConfig %v without declaring capabilities", rc2)
	}

	// The config changes: the DEL still goes to the network of the ADD,
	// from libcni's cache. The netns path is no namespace: passed empty.
	mustWrite(t, filepath.Join(e.confDir, "00-other.conflist"), `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"fake2"}]}`)
	if got := e.m.NetworkName(); got != "other" {
		t.Fatalf("NetworkName() = %q after adding 00-other", got)
	}
	if err := e.m.Teardown(ctx, pod); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	want = []string{"DEL pod1 netns= " + podArgs, "DEL pod1 netns= " + podArgs}
	if diff := cmp.Diff(want, e.calls(t)); diff != "" {
		t.Errorf("DEL calls (-want +got):\n%s", diff)
	}
	del := e.stdin(t, "fake", "DEL")
	if del["name"] != "fakenet" || del["prevResult"] == nil {
		t.Errorf("DEL stdin = %v, want network fakenet with prevResult", del)
	}
	if rc, _ := del["runtimeConfig"].(map[string]interface{}); rc["portMappings"] == nil {
		t.Errorf("DEL runtimeConfig = %v, want the ADD's portMappings", rc)
	}

	// Again: nothing cached, so a DEL with the current network (releases
	// any IPAM state a lost cache forgot), and success.
	if err := e.m.Teardown(ctx, pod); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	want = []string{"DEL pod1 netns= " + podArgs}
	if diff := cmp.Diff(want, e.calls(t)); diff != "" {
		t.Errorf("second Teardown calls (-want +got):\n%s", diff)
	}
	if del := e.stdin(t, "fake2", "DEL"); del["name"] != "other" {
		t.Errorf("second Teardown DEL went to network %v, want other", del["name"])
	}

	// No network at all and nothing cached: nothing to undo.
	for _, f := range []string{"00-other.conflist", "10-fake.conflist"} {
		os.Remove(filepath.Join(e.confDir, f))
	}
	if err := e.m.Teardown(ctx, pod); err != nil {
		t.Fatalf("Teardown with no network: %v", err)
	}
	if c := e.calls(t); len(c) != 0 {
		t.Errorf("Teardown with no network called plugins: %v", c)
	}
	if _, err := e.m.Setup(ctx, pod); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Setup with no network = %v, want FailedPrecondition", err)
	}
}

func TestSetupFailureRunsDel(t *testing.T) {
	// fake2 fails; its DEL and fake's DEL must both run, last plugin first.
	e := newFakeEnv(t, `{"cniVersion":"1.0.0","name":"fakenet","plugins":[{"type":"fake"},{"type":"fake2","fail":true},{"type":"missing-plugin"}]}`)
	pod := Pod{ID: "pod1", Name: "web", Namespace: "ns", UID: "uid1", NetNS: "/nonexistent/ns"}
	if _, err := e.m.Setup(context.Background(), pod); err == nil || !strings.Contains(err.Error(), "fake failure") {
		t.Fatalf("Setup = %v, want the plugin's failure", err)
	}
	want := []string{
		"ADD pod1 netns=/nonexistent/ns " + podArgs,
		"ADD pod1 netns=/nonexistent/ns " + podArgs,
		// missing-plugin's DEL fails (no binary) and the undo goes on.
		"DEL pod1 netns=/nonexistent/ns " + podArgs,
		"DEL pod1 netns=/nonexistent/ns " + podArgs,
	}
	if diff := cmp.Diff(want, e.calls(t)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if e.stdin(t, "fake", "DEL")["name"] != "fakenet" {
		t.Error("fake got no DEL")
	}
	atts, err := e.m.cni.GetCachedAttachments(pod.ID)
	if err != nil || len(atts) != 0 {
		t.Errorf("cache after failed Setup = %v, %v; want empty", atts, err)
	}
}

func TestSetupCancelledStillUndoes(t *testing.T) {
	e := newFakeEnv(t, `{"cniVersion":"1.0.0","name":"fakenet","plugins":[{"type":"fake"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pod := Pod{ID: "pod1", Name: "web", Namespace: "ns", UID: "uid1", NetNS: "/x"}
	if _, err := e.m.Setup(ctx, pod); err == nil {
		t.Fatal("Setup with a cancelled ctx succeeded")
	}
	// The ADD never started; the undo DEL ran despite the cancelled ctx.
	want := []string{"DEL pod1 netns=/x " + podArgs}
	if diff := cmp.Diff(want, e.calls(t)); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestPluginTimeout(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "slow"), []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	confDir := t.TempDir()
	mustWrite(t, filepath.Join(confDir, "10.conflist"), `{"cniVersion":"1.0.0","name":"slow","plugins":[{"type":"slow"}]}`)
	m, err := New(Config{ConfDir: confDir, BinDirs: []string{bin}, CacheDir: t.TempDir(), PluginTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = m.Setup(context.Background(), Pod{ID: "p", NetNS: "/x"})
	if err == nil {
		t.Fatal("Setup with a hanging plugin succeeded")
	}
	// ADD and the undo DEL each get cut off.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("hanging plugin was not cut off by the timeout: took %v", d)
	}
}

func TestPodValidation(t *testing.T) {
	e := newFakeEnv(t, twoFakes)
	tests := []struct {
		name string
		pod  Pod
	}{
		{name: "no id", pod: Pod{NetNS: "/x"}},
		{name: "semicolon in name", pod: Pod{ID: "p", Name: "a;b", NetNS: "/x"}},
		{name: "equals in namespace", pod: Pod{ID: "p", Namespace: "a=b", NetNS: "/x"}},
		{name: "no netns", pod: Pod{ID: "p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.m.Setup(context.Background(), tc.pod); !errdefs.IsInvalidArgument(err) {
				t.Errorf("Setup = %v, want InvalidArgument", err)
			}
			if c := e.calls(t); len(c) != 0 {
				t.Errorf("invalid pod reached plugins: %v", c)
			}
		})
	}
}
