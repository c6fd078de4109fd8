// Package cni connects pods to the node's network through CNI plugins and
// pins each pod's network namespace.
//
// A Manager runs the plugins of one network configuration, the lexically
// first usable file in its ConfDir, through libcni. ADD results are cached by
// libcni in CacheDir; DEL uses that cache (the config and arguments of the
// ADD), so a pod is torn down by the plugins that set it up even when the
// config directory changed in between.
package cni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// DefaultPluginTimeout bounds one plugin invocation when Config.PluginTimeout
// is zero.
const DefaultPluginTimeout = 2 * time.Minute

// ifName is the pod's interface, named as kubelet and every CRI runtime name
// it.
const ifName = "eth0"

// Config configures pod networking.
type Config struct {
	ConfDir  string   // network configs, e.g. /etc/cni/net.d
	BinDirs  []string // plugin binaries, e.g. /usr/lib/cni, /opt/cni/bin
	CacheDir string   // libcni's result cache
	Logger   *slog.Logger

	// PluginTimeout bounds each plugin invocation (one ADD or DEL of one
	// plugin of the list); zero means DefaultPluginTimeout. A shorter
	// deadline on the caller's ctx wins.
	PluginTimeout time.Duration
}

// Pod identifies a pod to the network plugins.
type Pod struct {
	ID        string // sandbox id
	Name      string
	Namespace string
	UID       string
	NetNS     string // path of the pinned netns
	Ports     []PortMapping
}

// PortMapping is a CRI port mapping (passed as the portMappings capability).
type PortMapping struct {
	Protocol      string // "tcp", "udp", "sctp"
	ContainerPort int32
	HostPort      int32
	HostIP        string
}

// Result is what network setup gave a pod.
type Result struct {
	IPs []string // primary first
}

// Manager runs CNI plugins. Its methods are safe for concurrent use.
type Manager struct {
	confDir string
	binDirs []string
	log     *slog.Logger
	timeout time.Duration
	cni     *libcni.CNIConfig

	// mu guards the loaded network and the pod CIDRs. It is never held
	// across a plugin call.
	mu       sync.Mutex
	stamp    string                    // confDir listing the network was loaded from
	network  *libcni.NetworkConfigList // nil when none could be loaded
	netFile  string                    // file network came from
	loadErr  error                     // why network is nil
	podCIDRs []string                  // ipRanges capability, from SetPodCIDR
}

// New returns a manager; a missing or empty ConfDir is not an error (Status
// reports it).
func New(cfg Config) (*Manager, error) {
	if cfg.ConfDir == "" {
		return nil, fmt.Errorf("new cni manager: conf dir is empty: %w", errdefs.ErrInvalidArgument)
	}
	if len(cfg.BinDirs) == 0 {
		return nil, fmt.Errorf("new cni manager: no plugin bin dirs: %w", errdefs.ErrInvalidArgument)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	timeout := cfg.PluginTimeout
	if timeout <= 0 {
		timeout = DefaultPluginTimeout
	}
	cacheDir := cfg.CacheDir
	if cacheDir == "" {
		cacheDir = libcni.CacheDir
	}
	ex := &timedExec{
		DefaultExec: &invoke.DefaultExec{RawExec: &invoke.RawExec{}},
		timeout:     timeout,
	}
	m := &Manager{
		confDir: cfg.ConfDir,
		binDirs: append([]string(nil), cfg.BinDirs...),
		log:     log.With("component", "cni"),
		timeout: timeout,
		cni:     libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cacheDir, ex),
	}
	return m, nil
}

// timedExec gives every plugin invocation its own deadline.
type timedExec struct {
	*invoke.DefaultExec
	timeout time.Duration
}

// ExecPlugin runs one plugin with the exec's timeout.
func (e *timedExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return e.DefaultExec.ExecPlugin(ctx, pluginPath, stdin, environ)
}

// Status returns nil when a network config is loaded, else an error saying why
// not. It reloads ConfDir when its contents changed. It also reports a plugin
// of the network that is missing from every bin dir. The error wraps
// errdefs.ErrFailedPrecondition.
func (m *Manager) Status() error {
	list, file, err := m.current()
	if err != nil {
		return err
	}
	for _, p := range list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, m.binDirs); err != nil {
			return fmt.Errorf("cni network %q (%s): plugin %q not found in %s: %w",
				list.Name, file, p.Network.Type, strings.Join(m.binDirs, ":"), errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// NetworkName returns the name of the loaded network, or "" when none is
// loaded. It reloads ConfDir when its contents changed.
func (m *Manager) NetworkName() string {
	list, _, err := m.current()
	if err != nil {
		return ""
	}
	return list.Name
}

// current returns the network to use, reloading ConfDir when it changed.
func (m *Manager) current() (*libcni.NetworkConfigList, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshLocked()
	if m.network == nil {
		return nil, "", m.loadErr
	}
	return m.network, m.netFile, nil
}

// refreshLocked reloads the network when the listing of confDir changed.
func (m *Manager) refreshLocked() {
	stamp, err := dirStamp(m.confDir)
	if err != nil {
		m.stamp, m.network, m.netFile = "", nil, ""
		m.loadErr = fmt.Errorf("cni config dir %s: %w: %w", m.confDir, err, errdefs.ErrFailedPrecondition)
		return
	}
	if stamp == m.stamp && (m.network != nil || m.loadErr != nil) {
		return
	}
	m.stamp = stamp
	list, file, err := loadFirst(m.confDir, m.log)
	if err != nil {
		m.network, m.netFile, m.loadErr = nil, "", err
		return
	}
	if m.network == nil || file != m.netFile || list.Name != m.network.Name {
		m.log.Info("cni network loaded", "network", list.Name, "file", file)
	}
	m.network, m.netFile, m.loadErr = list, file, nil
}

// Setup runs ADD for the pod in its netns; on error it runs DEL so nothing is
// left half-made. An invalid pod is errdefs.ErrInvalidArgument; no loaded
// network is errdefs.ErrFailedPrecondition.
func (m *Manager) Setup(ctx context.Context, pod Pod) (_ *Result, retErr error) {
	if err := validatePod(pod); err != nil {
		return nil, fmt.Errorf("set up pod network: %w", err)
	}
	if pod.NetNS == "" {
		return nil, fmt.Errorf("set up pod %s network: netns path is empty: %w", pod.ID, errdefs.ErrInvalidArgument)
	}
	list, _, err := m.current()
	if err != nil {
		return nil, fmt.Errorf("set up pod %s network: %w", pod.ID, err)
	}
	rt := m.runtimeConf(pod, pod.NetNS)

	defer func() {
		if retErr == nil {
			return
		}
		// The ctx may be cancelled by now (a kubelet timeout); the undo
		// must run regardless so no IP or veth is leaked.
		m.delEach(context.WithoutCancel(ctx), list, rt)
	}()

	res, err := m.cni.AddNetworkList(ctx, list, rt)
	if err != nil {
		return nil, fmt.Errorf("cni add pod %s network %q: %w", pod.ID, list.Name, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("cni add pod %s network %q: convert result: %w", pod.ID, list.Name, err)
	}
	ips := resultIPs(r)
	if len(ips) == 0 {
		return nil, fmt.Errorf("cni add pod %s network %q: plugins returned no IP address", pod.ID, list.Name)
	}
	m.log.InfoContext(ctx, "pod network set up", "pod_id", pod.ID, "network", list.Name, "ips", ips)
	return &Result{IPs: ips}, nil
}

// delEach runs DEL for every plugin of list, last first, going on past
// failures, which it logs: libcni's DelNetworkList stops at the first failing
// plugin, which after a failed ADD (say, a missing plugin binary late in the
// chain) would leave the earlier plugins' IPs and veths behind.
func (m *Manager) delEach(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) {
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		one := &libcni.NetworkConfigList{
			Name:       list.Name,
			CNIVersion: list.CNIVersion,
			Plugins:    []*libcni.PluginConfig{list.Plugins[i]},
			Bytes:      list.Bytes,
		}
		if err := m.cni.DelNetworkList(ctx, one, rt); err != nil {
			m.log.WarnContext(ctx, "cni del", "pod_id", rt.ContainerID,
				"network", list.Name, "plugin", list.Plugins[i].Network.Type, "error", err)
		}
	}
}

// resultIPs returns the pod's addresses in the plugins' order, leaving out
// addresses of host-side interfaces (those not inside a sandbox).
func resultIPs(r *types100.Result) []string {
	var ips []string
	for _, ipc := range r.IPs {
		if ipc == nil || ipc.Address.IP == nil {
			continue
		}
		if ipc.Interface != nil {
			i := *ipc.Interface
			if i >= 0 && i < len(r.Interfaces) && r.Interfaces[i].Sandbox == "" {
				continue
			}
		}
		ips = append(ips, ipc.Address.IP.String())
	}
	return ips
}

// Teardown runs DEL for the pod. It is idempotent: a pod already torn down or
// whose netns is gone is not an error.
//
// The DEL of a pod that was set up uses libcni's cached config and arguments
// of its ADD. A pod with nothing cached gets a DEL with the current network,
// so its IPAM state is released even after a lost cache; with no network
// loaded either, there is nothing to undo. A netns path that no longer holds
// a namespace is passed as empty, which the CNI spec allows for DEL.
func (m *Manager) Teardown(ctx context.Context, pod Pod) error {
	if err := validatePod(pod); err != nil {
		return fmt.Errorf("tear down pod network: %w", err)
	}
	netns := pod.NetNS
	if netns != "" && !isNetNS(netns) {
		netns = ""
	}

	atts, err := m.cni.GetCachedAttachments(pod.ID)
	if err != nil {
		// An unreadable cache must not block teardown; fall through to a
		// DEL with the current network.
		m.log.WarnContext(ctx, "read cni cache", "pod_id", pod.ID, "error", err)
		atts = nil
	}
	var errs []error
	done := false
	for _, a := range atts {
		list, err := libcni.NetworkConfFromBytes(a.Config)
		if err != nil || len(list.Plugins) == 0 {
			m.log.WarnContext(ctx, "unusable cached cni config", "pod_id", pod.ID, "network", a.Network, "error", err)
			continue
		}
		rt := &libcni.RuntimeConf{
			ContainerID:    a.ContainerID,
			NetNS:          netns,
			IfName:         a.IfName,
			Args:           a.CniArgs,
			CapabilityArgs: a.CapabilityArgs,
		}
		if err := m.cni.DelNetworkList(ctx, list, rt); err != nil {
			errs = append(errs, fmt.Errorf("cni del pod %s network %q: %w", pod.ID, list.Name, err))
			continue
		}
		done = true
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if done {
		m.log.InfoContext(ctx, "pod network torn down", "pod_id", pod.ID)
		return nil
	}

	// Nothing cached: the pod was never set up, its setup failed (and was
	// undone), or the cache was lost. A best-effort DEL releases what a lost
	// cache forgot; its failures are logged, not returned, as a pod with no
	// record of a network must not become impossible to remove.
	list, _, err := m.current()
	if err != nil {
		m.log.DebugContext(ctx, "no cni network to tear down pod with", "pod_id", pod.ID, "reason", err)
		return nil
	}
	m.delEach(ctx, list, m.runtimeConf(pod, netns))
	return nil
}

// SetPodCIDR records the node's pod CIDR (CRI UpdateRuntimeConfig); it is
// passed to plugins as the ipRanges capability. kubelet joins the CIDRs of a
// dual-stack node with commas; each becomes its own range. An empty cidr
// clears it. A malformed CIDR is errdefs.ErrInvalidArgument and changes
// nothing.
func (m *Manager) SetPodCIDR(cidr string) error {
	var cidrs []string
	if s := strings.TrimSpace(cidr); s != "" {
		for _, c := range strings.Split(s, ",") {
			c = strings.TrimSpace(c)
			_, ipn, err := net.ParseCIDR(c)
			if err != nil {
				return fmt.Errorf("set pod cidr: invalid CIDR %q: %w", c, errdefs.ErrInvalidArgument)
			}
			cidrs = append(cidrs, ipn.String())
		}
	}
	m.mu.Lock()
	m.podCIDRs = cidrs
	m.mu.Unlock()
	return nil
}

// runtimeConf builds the plugin arguments for pod.
func (m *Manager) runtimeConf(pod Pod, netns string) *libcni.RuntimeConf {
	caps := map[string]interface{}{}
	var pms []map[string]interface{}
	for _, p := range pod.Ports {
		// Only ports bound on the host are mappings; a bare container
		// port is informational in CRI.
		if p.HostPort <= 0 {
			continue
		}
		proto := strings.ToLower(p.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		pm := map[string]interface{}{
			"hostPort":      p.HostPort,
			"containerPort": p.ContainerPort,
			"protocol":      proto,
		}
		if p.HostIP != "" {
			pm["hostIP"] = p.HostIP
		}
		pms = append(pms, pm)
	}
	if len(pms) > 0 {
		caps["portMappings"] = pms
	}
	m.mu.Lock()
	cidrs := m.podCIDRs
	m.mu.Unlock()
	if len(cidrs) > 0 {
		var ranges [][]map[string]interface{}
		for _, c := range cidrs {
			ranges = append(ranges, []map[string]interface{}{{"subnet": c}})
		}
		caps["ipRanges"] = ranges
	}
	return &libcni.RuntimeConf{
		ContainerID: pod.ID,
		NetNS:       netns,
		IfName:      ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", pod.Namespace},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", pod.ID},
			{"K8S_POD_UID", pod.UID},
		},
		CapabilityArgs: caps,
	}
}

// validatePod rejects what cannot be passed to plugins: CNI_ARGS is a
// "k=v;k=v" string, so no value may hold ';' or '='.
func validatePod(pod Pod) error {
	if pod.ID == "" {
		return fmt.Errorf("pod id is empty: %w", errdefs.ErrInvalidArgument)
	}
	for _, f := range []struct{ name, v string }{
		{"id", pod.ID}, {"name", pod.Name}, {"namespace", pod.Namespace}, {"uid", pod.UID},
	} {
		if strings.ContainsAny(f.v, ";=") {
			return fmt.Errorf("pod %s %q: must not contain ';' or '=': %w", f.name, f.v, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
