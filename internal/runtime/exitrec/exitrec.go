// Package exitrec is the exit record both backends keep in a container's
// state dir: how its init process ended, written once it exited (by
// crin-shim for the oci backend, by crind for shimv2, and by crind on a
// dead shim's behalf for both, runtime.RecordShimDied), so that it
// outlives the shim and crind restarts. It is a leaf package, so that
// crin-shim links nothing else of crind.
package exitrec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// File is the name of the exit record in a container's state dir.
const File = "exit"

// Exit is how a container's init process ended. It is kept by the shim and
// written to the exit file, so it survives the shim.
type Exit struct {
	Pid        int       `json:"pid"`
	ExitCode   int32     `json:"exit_code"` // 128+signal when killed by a signal
	Signal     int       `json:"signal,omitempty"`
	OOMKilled  bool      `json:"oom_killed"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at"`
	// Reason and Message are set only when someone other than the shim
	// wrote the record: crind, finding the shim dead (see
	// runtime.ReasonShimDied). A shim's own record leaves them empty.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Write records e as dir/exit atomically: readers see either no file or
// the whole record, even across a crash.
func Write(dir string, e Exit) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode exit: %w", err)
	}
	return writeFileAtomic(dir, File, data)
}

// Read reads the exit recorded in dir. A missing record wraps
// os.ErrNotExist.
func Read(dir string) (Exit, error) {
	var e Exit
	data, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return e, fmt.Errorf("read exit: %w", err)
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("decode exit %s: %w", filepath.Join(dir, File), err)
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
