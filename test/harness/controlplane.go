package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/poll"
)

// The control plane's versions: kube-apiserver is the kubelet's release,
// etcd the server Kubernetes v1.37.2 is built against. Both are built by
// test/e2e/kubelet/build.sh into the cache beside the kubelet, from the
// versions test/e2e/kubelet/tools pins.
const (
	APIServerVersion = "v1.37.2"
	EtcdVersion      = "v3.7.0"
)

// CacheBinary is the path of a binary test/e2e/kubelet/build.sh (or
// another of the cached builds) keeps in the cache: $XDG_CACHE_HOME/crin,
// or ~/.cache/crin.
func CacheBinary(name string) string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "crin", name)
}

// ControlPlane is a real etcd and kube-apiserver on 127.0.0.1, for the
// tests that need what only a kubelet with an API server does (a
// RuntimeClass is looked up through the API; a standalone kubelet ignores
// runtimeClassName). Nothing else of a cluster runs: no scheduler (pods
// name their node), no controller manager (so no service account tokens:
// the ServiceAccount admission plugin is off, and pods mount none).
// Everyone who holds Token is system:masters, and authorization is
// AlwaysAllow.
type ControlPlane struct {
	// URL is the API server's https URL on 127.0.0.1.
	URL string
	// Port is its port: a guest of the node lane's VM reaches it at
	// 10.0.2.2:Port.
	Port  int
	Token string
	// Kubeconfig is a kubelet's kubeconfig naming URL.
	Kubeconfig string
	dir        string
	client     *http.Client
	procs      []cpProc
}

// cpProc is a control plane process, and a channel closed when it exits.
type cpProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartControlPlane starts etcd and kube-apiserver with their data, keys,
// certificates and logs under dir, writes Kubeconfig, and registers the
// cleanup that kills both. It does not wait for them: the API server
// takes seconds to start (tens on a loaded host), which the caller
// spends starting its node (a kubelet retries until the API answers);
// Ready waits. It skips the test when the binaries are not built
// (test/e2e/kubelet/build.sh builds them; make e2e runs it first).
func StartControlPlane(t testing.TB, dir string) *ControlPlane {
	t.Helper()
	etcdBin := CacheBinary("etcd-" + EtcdVersion)
	apiBin := CacheBinary("kube-apiserver-" + APIServerVersion)
	for _, b := range []string{etcdBin, apiBin} {
		if _, err := os.Stat(b); err != nil {
			t.Skipf("no %s: run test/e2e/kubelet/build.sh first (make e2e does)", b)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{
		dir:   dir,
		Token: RandHex(16),
		client: &http.Client{
			Timeout: time.Minute,
			// The API server's certificate is its own self-signed one.
			Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		},
	}
	t.Cleanup(cp.stop)

	etcdURL := cp.startEtcd(t, etcdBin)
	cp.startAPIServer(t, apiBin, etcdURL)
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, cp.KubeconfigFor(cp.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return cp
}

// Ready waits for the API server's /readyz and the default namespace, and
// fails the test if etcd or the API server exited.
func (cp *ControlPlane) Ready(t testing.TB) {
	t.Helper()
	poll.Until(t, 3*time.Minute, "kube-apiserver /readyz", func() (bool, string) {
		for _, p := range cp.procs {
			select {
			case <-p.done:
				t.Fatalf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, cp.Log(p.name, 6000))
			default:
			}
		}
		b, err := cp.Do(http.MethodGet, "/readyz", nil)
		if err != nil {
			return false, err.Error()
		}
		return string(b) == "ok", string(b)
	})
	// The default namespace is made by the API server after it is ready.
	poll.Until(t, time.Minute, "the default namespace", func() (bool, string) {
		_, err := cp.Do(http.MethodGet, "/api/v1/namespaces/default", nil)
		return err == nil, fmt.Sprint(err)
	})
}

// startEtcd starts etcd on two free ports and returns its client URL.
func (cp *ControlPlane) startEtcd(t testing.TB, bin string) string {
	t.Helper()
	client, peer := FreePort(t), FreePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cp.start(t, "etcd", bin,
		"--name=crintest",
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=crintest="+peerURL,
		// A test's cluster: losing it in a host crash loses nothing.
		"--unsafe-no-fsync",
	)
	return etcdURL
}

// startAPIServer starts kube-apiserver on a free port, storing in etcd at
// etcdURL, with a token file and a service account key of its own.
func (cp *ControlPlane) startAPIServer(t testing.TB, bin, etcdURL string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKey := filepath.Join(cp.dir, "sa.key")
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(saKey, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(cp.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(cp.Token+`,crintest-admin,crintest-admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp.Port = FreePort(t)
	cp.URL = fmt.Sprintf("https://127.0.0.1:%d", cp.Port)
	cp.start(t, "kube-apiserver", bin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", cp.Port),
		"--cert-dir="+filepath.Join(cp.dir, "pki"),
		"--token-auth-file="+tokens,
		"--authorization-mode=AlwaysAllow",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		// Allocated from, never routed: no proxy runs.
		"--service-cluster-ip-range=10.254.0.0/24",
		// The kubernetes service's endpoint would be 127.0.0.1, which
		// an Endpoints object may not hold.
		"--endpoint-reconciler-type=none",
		"--disable-admission-plugins=ServiceAccount",
	)
}

// KubeconfigFor is a kubeconfig (JSON, which kubeconfig loaders read) for
// the API server at server (its URL as a client reaches it), with the
// token and without verifying the self-signed certificate.
func (cp *ControlPlane) KubeconfigFor(server string) []byte {
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "crintest", "cluster": map[string]any{
			"server": server, "insecure-skip-tls-verify": true,
		}}},
		"users":           []any{map[string]any{"name": "crintest", "user": map[string]any{"token": cp.Token}}},
		"contexts":        []any{map[string]any{"name": "crintest", "context": map[string]any{"cluster": "crintest", "user": "crintest"}}},
		"current-context": "crintest",
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// start runs bin with args, its output in <dir>/<name>.log, killed with
// the test binary if that dies first.
func (cp *ControlPlane) start(t testing.TB, name, bin string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := cpProc{name: name, cmd: cmd, done: make(chan struct{})}
	cp.procs = append(cp.procs, p)
	go func() { _ = cmd.Wait(); close(p.done) }()
}

// Log is the tail of a control plane process's output (name is "etcd" or
// "kube-apiserver").
func (cp *ControlPlane) Log(name string, max int) string {
	b, _ := os.ReadFile(filepath.Join(cp.dir, name+".log"))
	return Tail(string(b), max)
}

// stop kills the API server, then etcd, and waits for both.
func (cp *ControlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
		}
	}
}

// Do sends method to path on the API server with the token, body (if not
// nil) as JSON, and returns the body of a 2xx answer; any other status is
// an error naming it, with the answer's body. ErrAPINotFound is in the
// chain of a 404.
func (cp *ControlPlane) Do(method, path string, body any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, cp.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cp.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cp.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		err := fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		if resp.StatusCode == http.StatusNotFound {
			err = errors.Join(ErrAPINotFound, err)
		}
		return b, err
	}
	return b, nil
}

// ErrAPINotFound is in the chain of ControlPlane.Do's error for a 404.
var ErrAPINotFound = errors.New("not found")

// Get decodes the object at path into v.
func (cp *ControlPlane) Get(path string, v any) error {
	b, err := cp.Do(http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// FreePort is a TCP port on 127.0.0.1 that nothing listened on a moment
// ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
