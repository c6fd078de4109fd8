//go:build node

package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/poll"
)

// Where an operator's install puts crind in the VM.
const (
	binDir     = "/usr/local/bin"
	unitPath   = "/etc/systemd/system/crind.service"
	configPath = "/etc/crin/crin.toml"
	criSocket  = "/run/crin/crin.sock"
)

// Crind is crind installed in a VM as a systemd service, and a CRI client
// dialled to it from the host.
type Crind struct {
	VM *VM
	RS runtimeapi.RuntimeServiceClient
	IS runtimeapi.ImageServiceClient
}

// InstallOptions say what an install writes besides the binaries and the
// unit.
type InstallOptions struct {
	// Config is /etc/crin/crin.toml; empty removes it (every key has a
	// default).
	Config string
}

// Install installs crind the way docs/node-lane.md tells an operator to:
// the binaries (built on the host, pure Go) into /usr/local/bin, the
// shipped unit contrib/systemd/crind.service into /etc/systemd/system,
// crin's default CNI network, then `systemctl enable --now crind`. It
// returns once crind answers CRI Version through the forwarded socket.
func Install(t *testing.T, vm *VM, o InstallOptions) *Crind {
	t.Helper()
	bin := harness.Build(t)
	start := time.Now()
	for _, name := range []string{"crind", "crin-shim", "crin-pause", "crin-logger"} {
		vm.CopyIn(filepath.Join(bin, name), binDir+"/"+name, 0o755)
	}
	vm.CopyIn(filepath.Join(harness.RepoRoot(), "contrib", "systemd", "crind.service"), unitPath, 0o644)
	if o.Config != "" {
		vm.WriteFile(configPath, []byte(o.Config), 0o644)
	} else {
		// An earlier test's config, in the shared VM.
		vm.MustRun("rm -f " + configPath)
	}
	vm.MustRun("crind cni install-default")
	// Type=notify: enable --now returns when crind has said READY=1, that
	// is, with its CRI socket bound.
	if _, err := vm.Run("systemctl daemon-reload && systemctl enable --now crind"); err != nil {
		log, _ := vm.Run("journalctl -u crind --no-pager | tail -50")
		vm.fatalf("start crind: %v\njournal:\n%s", err, log)
	}
	t.Logf("crind installed and started in %v", time.Since(start).Round(100*time.Millisecond))

	conn, err := grpc.NewClient("unix://"+vm.ForwardUnix(criSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &Crind{VM: vm, RS: runtimeapi.NewRuntimeServiceClient(conn), IS: runtimeapi.NewImageServiceClient(conn)}
	c.WaitServing(t)
	return c
}

// WaitServing waits for crind to answer CRI Version.
func (c *Crind) WaitServing(t *testing.T) {
	t.Helper()
	poll.Until(t, 3*time.Minute, "crind answering CRI Version", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		v, err := c.RS.Version(ctx, &runtimeapi.VersionRequest{})
		if err != nil {
			return false, err.Error()
		}
		return v.RuntimeName != "", fmt.Sprintf("version %v", v)
	})
}

// MainPID is crind's PID in the VM as systemd knows it (0: not running).
func (c *Crind) MainPID(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(c.VM.MustRun("systemctl show -p MainPID --value crind"))
}

// Journal is the end of crind's journal, for failure messages.
func (c *Crind) Journal() string {
	out, _, _ := c.VM.Exec(time.Minute, "journalctl -u crind --no-pager | tail -80")
	return out
}
