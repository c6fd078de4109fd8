package shim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Names of the files a shim keeps in its container's state directory.
const (
	ExitFile    = "exit"     // JSON Exit, written once the container exited
	ShimPidFile = "shim.pid" // the pid of the shim (in its dir) or of the container's shim
	// ShimDirFile, in a container's state dir, holds the path of the dir
	// of the shim that supervises it (its pod's). Without it the shim's
	// dir is the container's own (crind before one shim per pod).
	ShimDirFile = "shim.dir"
	InitPidFile = "init.pid" // the container init's pid, from the runtime
	ShimLogFile = "shim.log" // the shim's own log
	RuntimeLog  = "runtime.log"
	SocketFile  = "shim.sock"
	// ConsoleSocketFile is where a terminal container's shim receives
	// the terminal from the runtime; it exists only during create.
	ConsoleSocketFile = "console.sock"
	ConfigFile        = "config.json"
	socketMaxLen      = 107 // sun_path holds 108 bytes including the NUL
)

// WriteExit records e as dir/exit atomically: readers see either no file or
// the whole record, even across a crash.
func WriteExit(dir string, e Exit) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode exit: %w", err)
	}
	return writeFileAtomic(dir, ExitFile, data)
}

// ReadExit reads the exit recorded in dir. A missing record wraps
// os.ErrNotExist.
func ReadExit(dir string) (Exit, error) {
	var e Exit
	data, err := os.ReadFile(filepath.Join(dir, ExitFile))
	if err != nil {
		return e, fmt.Errorf("read exit: %w", err)
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("decode exit %s: %w", filepath.Join(dir, ExitFile), err)
	}
	return e, nil
}

func writeFileAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
