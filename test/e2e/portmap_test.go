//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

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
