package podstats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cni"
)

// defaultInterface is the pod interface CNI sets up (cni.Pod's IfName).
const defaultInterface = "eth0"

// ifaceCounters are the /proc/net/dev counters of one interface.
type ifaceCounters struct {
	name                                 string
	rxBytes, rxPackets, rxErrors, rxDrop uint64
	txBytes, txPackets, txErrors, txDrop uint64
}

// podNetwork reads the interface counters inside the pod's network
// namespace (pinned at netns): eth0 as the default interface, every
// interface but loopback in the list.
func podNetwork(netns string) (*runtimeapi.NetworkUsage, error) {
	ifs, err := readNetDev(netns)
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.NetworkUsage{Timestamp: time.Now().UnixNano()}
	for _, c := range ifs {
		if c.name == "lo" {
			continue
		}
		u := &runtimeapi.NetworkInterfaceUsage{
			Name:     c.name,
			RxBytes:  &runtimeapi.UInt64Value{Value: c.rxBytes},
			RxErrors: &runtimeapi.UInt64Value{Value: c.rxErrors},
			TxBytes:  &runtimeapi.UInt64Value{Value: c.txBytes},
			TxErrors: &runtimeapi.UInt64Value{Value: c.txErrors},
		}
		if c.name == defaultInterface {
			out.DefaultInterface = u
		}
		out.Interfaces = append(out.Interfaces, u)
	}
	return out, nil
}

// readNetDev reads /proc/net/dev as seen from inside the namespace pinned
// at netns. /proc/thread-self, not /proc/self: only the calling thread is
// in the namespace.
func readNetDev(netns string) ([]ifaceCounters, error) {
	var b []byte
	err := cni.InNetNS(netns, func() error {
		var err error
		b, err = os.ReadFile("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read pod network counters: %w", err)
	}
	return parseNetDev(b)
}

// parseNetDev parses /proc/net/dev: two header lines, then
// "iface: rx bytes packets errs drop fifo frame compressed multicast
// tx bytes packets errs drop fifo colls carrier compressed".
func parseNetDev(b []byte) ([]ifaceCounters, error) {
	var out []ifaceCounters
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue // a header line
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			return nil, fmt.Errorf("parse /proc/net/dev: %d fields for %s, want 16", len(f), strings.TrimSpace(name))
		}
		var v [16]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse /proc/net/dev: %s: %w", strings.TrimSpace(name), err)
			}
			v[i] = n
		}
		out = append(out, ifaceCounters{
			name:    strings.TrimSpace(name),
			rxBytes: v[0], rxPackets: v[1], rxErrors: v[2], rxDrop: v[3],
			txBytes: v[8], txPackets: v[9], txErrors: v[10], txDrop: v[11],
		})
	}
	return out, sc.Err()
}
