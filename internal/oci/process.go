package oci

import (
	"path"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultPath is set when neither the image nor the config sets PATH.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// processArgs merges the CRI command and args with the image's entrypoint
// and cmd the way Kubernetes documents it: a command replaces the
// entrypoint and discards the image's cmd; args replace the cmd.
func processArgs(cfg *runtimeapi.ContainerConfig, img ImageConfig) ([]string, error) {
	var args []string
	switch cmd, a := cfg.GetCommand(), cfg.GetArgs(); {
	case len(cmd) > 0:
		args = append(append(args, cmd...), a...)
	case len(a) > 0:
		args = append(append(args, img.Entrypoint...), a...)
	default:
		args = append(append(args, img.Entrypoint...), img.Cmd...)
	}
	if len(args) == 0 {
		return nil, invalidf("command: none in the config and none in the image")
	}
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, invalidf("command/args[%d] %q: contains a NUL byte", i, a)
		}
	}
	return args, nil
}

// processEnv is PATH (unless set) and HOSTNAME, then the image's env, then
// the config's envs, each later one replacing an earlier one of the same
// name in place. Malformed image entries (no "=", NUL bytes) are dropped:
// the image is untrusted and the runtime would refuse them.
func processEnv(cfg *runtimeapi.ContainerConfig, img ImageConfig, hostname string) ([]string, error) {
	var env envList
	if hostname != "" {
		env.set("HOSTNAME", hostname)
	}
	for _, kv := range img.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			continue
		}
		env.set(k, v)
	}
	for i, kv := range cfg.GetEnvs() {
		k, v := kv.GetKey(), string(kv.GetValue())
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, invalidf("envs[%d].key %q: not a valid variable name", i, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, invalidf("envs[%d].value of %q: contains a NUL byte", i, k)
		}
		env.set(k, v)
	}
	if !env.has("PATH") {
		env.list = append([]string{defaultPath}, env.list...)
	}
	return env.list, nil
}

// envList is an ordered KEY=VALUE list with replacement by name.
type envList struct{ list []string }

func (e *envList) index(k string) int {
	for i, kv := range e.list {
		if name, _, _ := strings.Cut(kv, "="); name == k {
			return i
		}
	}
	return -1
}

func (e *envList) has(k string) bool { return e.index(k) >= 0 }

func (e *envList) set(k, v string) {
	if i := e.index(k); i >= 0 {
		e.list[i] = k + "=" + v
		return
	}
	e.list = append(e.list, k+"="+v)
}

// processCwd is the config's working_dir, else the image's, else "/".
func processCwd(cfg *runtimeapi.ContainerConfig, img ImageConfig) (string, error) {
	if wd := cfg.GetWorkingDir(); wd != "" {
		if !path.IsAbs(wd) || strings.IndexByte(wd, 0) >= 0 {
			return "", invalidf("working_dir %q: not an absolute path", wd)
		}
		return path.Clean(wd), nil
	}
	if wd := img.WorkingDir; wd != "" && strings.IndexByte(wd, 0) < 0 {
		// An image's relative WorkingDir is taken from "/", as image
		// builders do.
		return path.Join("/", wd), nil
	}
	return "/", nil
}
