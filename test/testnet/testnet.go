// Package testnet gives a test daemon a pod network of its own: a bridge
// name and a /24 that nothing else on the machine uses, so test suites
// (and whatever else runs on the host) never share a bridge or a subnet,
// and a check that the pods left no veth or IP reservation behind. It is
// used by the integration and e2e suites only.
package testnet

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crin-dev/crin/test/harness"
)

// Name is the CNI network name of every test network (host-local keeps
// its reservations in IPAMDir/Name).
const Name = "crintest"

// Net is one daemon's pod network.
type Net struct {
	Bridge  string
	Subnet  *net.IPNet
	IPAMDir string // host-local's dataDir
}

// Pick finds a bridge name (prefix + 8 hex digits, at most 15 bytes) that
// does not exist and a 10.x.y.0/24 that overlaps no address or route on
// the host; host-local keeps its reservations under base.
func Pick(t *testing.T, prefix, base string) Net {
	t.Helper()
	var n Net
	for range 50 {
		name := prefix + harness.RandHex(4)
		if _, err := net.InterfaceByName(name); err != nil {
			n.Bridge = name
			break
		}
	}
	if n.Bridge == "" {
		t.Fatalf("no free bridge name %sXXXXXXXX", prefix)
	}
	used := hostNets(t)
	for range 200 {
		var rb [2]byte
		_, _ = rand.Read(rb[:])
		second := 100 + int(rb[0])%100 // 10.100.0.0 - 10.199.255.0
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", second, rb[1]))
		if !overlapsAny(cand, used) {
			n.Subnet = cand
			break
		}
	}
	if n.Subnet == nil {
		t.Fatalf("no free /24 in 10.100.0.0-10.199.255.0: the host uses %v", used)
	}
	n.IPAMDir = filepath.Join(base, "ipam")
	return n
}

// hostNets lists every network the host has an address or a route in.
func hostNets(t *testing.T) []*net.IPNet {
	t.Helper()
	var nets []*net.IPNet
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			nets = append(nets, ipn)
		}
	}
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			dst := f[0]
			if dst == "local" || dst == "broadcast" || dst == "unreachable" {
				if len(f) < 2 {
					continue
				}
				dst = f[1]
			}
			if !strings.Contains(dst, "/") {
				dst += "/32"
			}
			if _, ipn, err := net.ParseCIDR(dst); err == nil {
				nets = append(nets, ipn)
			}
		}
	}
	return nets
}

func overlapsAny(n *net.IPNet, others []*net.IPNet) bool {
	for _, o := range others {
		if o.Contains(n.IP) || n.Contains(o.IP) {
			return true
		}
	}
	return false
}

// Conflist is the CNI network list for n: bridged, no masquerade, no
// default route off the machine, followed by the extra plugins given (each
// a JSON object).
func (n Net) Conflist(extraPlugins ...string) string {
	plugins := []string{fmt.Sprintf(`{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}`, n.Bridge, n.Subnet.String(), n.IPAMDir)}
	plugins = append(plugins, extraPlugins...)
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    %s
  ]
}`, Name, strings.Join(plugins, ",\n    "))
}

// Gateway is the bridge's address: the first host of the subnet.
func (n Net) Gateway() net.IP {
	ip := make(net.IP, 4)
	copy(ip, n.Subnet.IP.To4())
	ip[3]++
	return ip
}

// CheckNoLeaks fails t when a pod's veth is still on the bridge or an IP is
// still reserved.
func (n Net) CheckNoLeaks(t *testing.T) {
	t.Helper()
	if ents, err := os.ReadDir(filepath.Join("/sys/class/net", n.Bridge, "brif")); err == nil {
		for _, e := range ents {
			t.Errorf("leaked veth on %s: %s", n.Bridge, e.Name())
		}
	}
	ents, _ := os.ReadDir(filepath.Join(n.IPAMDir, Name))
	for _, e := range ents {
		if net.ParseIP(e.Name()) != nil {
			t.Errorf("leaked IPAM reservation: %s", e.Name())
		}
	}
}

// Remove deletes the bridge CNI made for n.
func (n Net) Remove(t *testing.T) {
	t.Helper()
	if _, err := net.InterfaceByName(n.Bridge); err != nil {
		return
	}
	if out, err := exec.Command("ip", "link", "del", n.Bridge).CombinedOutput(); err != nil {
		t.Errorf("delete test bridge %s: %v: %s", n.Bridge, err, out)
	}
}
