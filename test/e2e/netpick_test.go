//go:build e2e

package e2e

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testNet is the pod network of one daemon under test: a bridge and a /24
// that nothing else on the machine uses, so runs of the suite (and anything
// else on the host) never share a bridge or a subnet.
type testNet struct {
	bridge  string
	subnet  *net.IPNet
	ipamDir string // host-local's dataDir for this network
}

// pickTestNet finds a bridge name that does not exist and a 10.x.y.0/24 that
// overlaps no address or route on the host.
func pickTestNet(t *testing.T, base string) testNet {
	t.Helper()
	var n testNet
	for range 50 {
		name := "crine" + randHex(4)
		if _, err := net.InterfaceByName(name); err != nil {
			n.bridge = name
			break
		}
	}
	if n.bridge == "" {
		t.Fatal("no free bridge name crineXXXXXXXX")
	}
	used := hostNets(t)
	for range 200 {
		var rb [2]byte
		_, _ = rand.Read(rb[:])
		second := 100 + int(rb[0])%100 // 10.100.0.0 - 10.199.255.0
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", second, rb[1]))
		if !overlapsAny(cand, used) {
			n.subnet = cand
			break
		}
	}
	if n.subnet == nil {
		t.Fatalf("no free /24 in 10.100.0.0/9: the host uses %v", used)
	}
	n.ipamDir = filepath.Join(base, "ipam")
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

// conflist is the CNI network list for n: bridged, no masquerade, no
// default route off the machine, and portmap for hostPort.
func (n testNet) conflist() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "crintest",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, n.bridge, n.subnet.String(), n.ipamDir)
}

// gateway is the bridge's address: the first host of the subnet.
func (n testNet) gateway() net.IP {
	ip := make(net.IP, 4)
	copy(ip, n.subnet.IP.To4())
	ip[3]++
	return ip
}

// portmapChains are the nat chains the portmap plugin creates on its first
// port mapping and never removes.
var portmapChains = []string{"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK"}

// hasPortmapChains reports whether portmap's chains are in the nat table.
func hasPortmapChains() bool {
	out, _ := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
	for _, c := range portmapChains {
		if strings.Contains(string(out), "-N "+c+"\n") {
			return true
		}
	}
	return false
}

// removePortmapChains deletes the jumps to portmap's chains and the chains,
// for a test that found none before it ran.
func removePortmapChains(t *testing.T) {
	script := `iptables -w -t nat -S | grep -E '^-A (PREROUTING|OUTPUT|POSTROUTING) .*-j CNI-HOSTPORT-' | sed 's/^-A/-D/' |
while read -r rule; do eval "iptables -w -t nat $rule"; done
for c in ` + strings.Join(portmapChains, " ") + `; do
	iptables -w -t nat -F "$c" 2>/dev/null || true
done
for c in ` + strings.Join(portmapChains, " ") + `; do
	iptables -w -t nat -X "$c" 2>/dev/null || true
done`
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("remove portmap's chains: %v: %s", err, out)
	}
	if hasPortmapChains() {
		t.Errorf("portmap's chains are still in the nat table")
	}
}

// checkNoLeaks fails t when a pod's veth is still on the bridge or an IP is
// still reserved.
func (n testNet) checkNoLeaks(t *testing.T) {
	t.Helper()
	if ents, err := os.ReadDir(filepath.Join("/sys/class/net", n.bridge, "brif")); err == nil {
		for _, e := range ents {
			t.Errorf("leaked veth on %s: %s", n.bridge, e.Name())
		}
	}
	ents, _ := os.ReadDir(filepath.Join(n.ipamDir, "crintest"))
	for _, e := range ents {
		if net.ParseIP(e.Name()) != nil {
			t.Errorf("leaked IPAM reservation: %s", e.Name())
		}
	}
}

// remove deletes the bridge CNI made for n.
func (n testNet) remove(t *testing.T) {
	if _, err := net.InterfaceByName(n.bridge); err != nil {
		return
	}
	if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil {
		t.Errorf("delete test bridge %s: %v: %s", n.bridge, err, out)
	}
}
