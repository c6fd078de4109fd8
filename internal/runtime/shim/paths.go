package shim

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"path/filepath"
	"strings"
)

// ShortSocketDir holds shim sockets whose natural path (in the container's
// state directory) would not fit in a unix socket address.
const ShortSocketDir = "/run/crin-shim"

// SocketPath returns the control socket of the shim whose state directory
// is dir: dir/shim.sock, or a path in ShortSocketDir derived from dir when
// that is too long for a unix socket address. Both the shim and its clients
// compute it the same way, so it needs no record.
func SocketPath(dir string) string {
	return socketPath(dir, SocketFile, ".sock")
}

// ConsoleSocketPath returns where the shim of the container whose state
// directory is dir listens for the runtime to hand it the container's
// terminal during create: dir/console.sock, or a derived path in
// ShortSocketDir like SocketPath's.
func ConsoleSocketPath(dir string) string {
	return socketPath(dir, ConsoleSocketFile, ".console")
}

// ExecConsoleSocketPath returns where the shim listens for the runtime to
// hand it the terminal of the exec whose process file is process:
// process's path with ".console" for ".json", or a path in ShortSocketDir
// derived from it when that is too long for a unix socket address.
func ExecConsoleSocketPath(process string) string {
	p := strings.TrimSuffix(process, ".json") + ".console"
	if len(p) <= socketMaxLen {
		return p
	}
	return shortSocketPath(process, ".console")
}

func socketPath(dir, file, suffix string) string {
	p := filepath.Join(dir, file)
	if len(p) <= socketMaxLen {
		return p
	}
	return shortSocketPath(dir, suffix)
}

// shortSocketPath names a socket in ShortSocketDir after the hash of key.
func shortSocketPath(key, suffix string) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(filepath.Clean(key)))
	return filepath.Join(ShortSocketDir, hex.EncodeToString(h.Sum(nil))+suffix)
}

// ParseRuntimeLog extracts the error messages from the output of an OCI
// runtime run with --log-format json (runc and crun write one JSON object
// per line with "level" and "msg"). Lines that are not JSON are kept as
// they are. Messages are joined with "; ".
func ParseRuntimeLog(data []byte) string {
	var msgs []string
	for line := range bytes.Lines(data) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if line[0] != '{' || json.Unmarshal(line, &rec) != nil {
			msgs = append(msgs, string(line))
			continue
		}
		switch rec.Level {
		case "error", "fatal", "panic":
			msgs = append(msgs, rec.Msg)
		}
	}
	return strings.Join(msgs, "; ")
}
