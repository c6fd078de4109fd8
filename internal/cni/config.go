package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
)

// DefaultConfFile is the name InstallDefault writes the default network as.
const DefaultConfFile = "10-crin-bridge.conflist"

// confExts are the file name extensions of network configs.
var confExts = []string{".conflist", ".conf", ".json"}

// defaultConflist is crin's network when the node has none. Pod traffic
// stays on the node: no masquerade and no default route, so a pod reaches
// only the bridge subnet (the host at the gateway and other pods). The
// ipRanges capability lets kubelet's pod CIDR replace the subnet. The
// cniVersion is the newest that Debian 12's plugins (1.1.1) speak.
const defaultConflist = `{
  "cniVersion": "1.0.0",
  "name": "crin",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "crin0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "capabilities": {"ipRanges": true},
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.87.0.0/16"}]]
      }
    }
  ]
}
`

// DefaultConflist returns crin's default network config list: a "bridge"
// network named "crin" on bridge crin0 with host-local addresses from
// 10.87.0.0/16, no masquerade and no default route.
func DefaultConflist() []byte {
	return []byte(defaultConflist)
}

// InstallDefault writes DefaultConflist to confDir as DefaultConfFile when
// confDir holds no network config (.conf, .conflist or .json file), creating
// confDir if needed. It reports whether it wrote the file. The write is
// atomic: a reader never sees half a file.
func InstallDefault(confDir string) (bool, error) {
	files, err := confFiles(confDir)
	if err != nil {
		return false, fmt.Errorf("install default cni config in %s: %w", confDir, err)
	}
	if len(files) > 0 {
		return false, nil
	}
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return false, fmt.Errorf("install default cni config: %w", err)
	}
	tmp, err := os.CreateTemp(confDir, ".crin-default-*")
	if err != nil {
		return false, fmt.Errorf("install default cni config: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // no-op after the rename
	if _, err := tmp.Write(DefaultConflist()); err != nil {
		_ = tmp.Close()
		return false, fmt.Errorf("install default cni config: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return false, fmt.Errorf("install default cni config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("install default cni config: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(confDir, DefaultConfFile)); err != nil {
		return false, fmt.Errorf("install default cni config: %w", err)
	}
	return true, nil
}

// confFiles returns the network config files in dir, sorted by name. A
// missing dir has none.
func confFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || !slices.Contains(confExts, filepath.Ext(e.Name())) {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	slices.Sort(files)
	return files, nil
}

// dirStamp summarizes the config files of dir (names, sizes, mtimes) so a
// change is seen without reading them.
func dirStamp(dir string) (string, error) {
	files, err := confFiles(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("ok\n")
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			// Gone between the listing and the stat: the next call sees it.
			fmt.Fprintf(&b, "%s gone\n", f)
			continue
		}
		fmt.Fprintf(&b, "%s %d %d %v\n", f, fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	}
	return b.String(), nil
}

// loadFirst loads the lexically first usable network config in dir. Files
// that cannot be used are logged and skipped. The error wraps
// errdefs.ErrFailedPrecondition.
func loadFirst(dir string, log *slog.Logger) (*libcni.NetworkConfigList, string, error) {
	files, err := confFiles(dir)
	if err != nil {
		return nil, "", fmt.Errorf("cni config dir %s: %w: %w", dir, err, errdefs.ErrFailedPrecondition)
	}
	if len(files) == 0 {
		return nil, "", fmt.Errorf("no cni network config (.conflist, .conf or .json) in %s: %w", dir, errdefs.ErrFailedPrecondition)
	}
	var errs []error
	for _, f := range files {
		list, err := loadFile(f)
		if err != nil {
			log.Warn("skip unusable cni config", "file", f, "error", err)
			errs = append(errs, err)
			continue
		}
		return list, f, nil
	}
	return nil, "", fmt.Errorf("no usable cni network config in %s: %w: %w", dir, errors.Join(errs...), errdefs.ErrFailedPrecondition)
}

// loadFile loads one config file. A single-plugin config (.conf, or .json
// without "plugins") becomes a list of that one plugin.
func loadFile(path string) (*libcni.NetworkConfigList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cni config: %w", err)
	}
	list, err := parseConfig(data, filepath.Ext(path) == ".conflist")
	if err != nil {
		return nil, fmt.Errorf("load cni config %s: %w", path, err)
	}
	return list, nil
}

// parseConfig parses a config list, or a single plugin config wrapped into a
// list when isList is false and the data has no "plugins" key.
func parseConfig(data []byte, isList bool) (*libcni.NetworkConfigList, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if _, ok := raw["plugins"]; !isList && !ok {
		wrapped, err := wrapPlugin(data)
		if err != nil {
			return nil, err
		}
		data = wrapped
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	if list.Name == "" {
		return nil, errors.New("network name is empty")
	}
	if len(list.Plugins) == 0 {
		return nil, fmt.Errorf("network %q has no plugins", list.Name)
	}
	if list.CNIVersion == "" {
		return nil, fmt.Errorf("network %q has no cniVersion", list.Name)
	}
	if _, _, _, err := version.ParseVersion(list.CNIVersion); err != nil {
		return nil, fmt.Errorf("network %q: cniVersion %q: %w", list.Name, list.CNIVersion, err)
	}
	return list, nil
}

// wrapPlugin turns a single plugin config into a one-plugin list.
func wrapPlugin(data []byte) ([]byte, error) {
	p, err := libcni.NetworkPluginConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	var plugin map[string]interface{}
	if err := json.Unmarshal(data, &plugin); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	b, err := json.Marshal(map[string]interface{}{
		"cniVersion": p.Network.CNIVersion,
		"name":       p.Network.Name,
		"plugins":    []interface{}{plugin},
	})
	if err != nil {
		return nil, fmt.Errorf("wrap plugin config: %w", err)
	}
	return b, nil
}
