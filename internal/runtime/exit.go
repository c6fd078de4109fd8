package runtime

import (
	"fmt"
	"time"

	"github.com/crin-dev/crin/internal/runtime/exitrec"
)

// StatusOfExit is the Status of a container whose exit e was recorded.
func StatusOfExit(e exitrec.Exit) Status {
	return Status{
		State: StateStopped, Pid: e.Pid, ExitCode: e.ExitCode, OOMKilled: e.OOMKilled,
		StartedAt: e.StartedAt, FinishedAt: e.FinishedAt, Reason: e.Reason, Message: e.Message,
	}
}

// RecordShimDied is the rule both backends follow for the exit nobody
// saw: a container whose shim died before recording its exit (killed,
// crashed, OOM-killed). When the container's state dir, dir, already
// holds an exit record, that record stands (a second caller, or the
// shim's own record, wins) and recorded is false. Otherwise settle kills
// and removes what is left of the container in the backend's own way and
// returns the exit to record: the init's pid, exit code 255 unless the
// backend still saw how the process itself ended, and a Message saying
// what happened. RecordShimDied then marks it ReasonShimDied, stamps
// FinishedAt and writes the record, which outlives the shim
// (docs/recovery.md). The caller serializes calls for one container.
func RecordShimDied(dir string, settle func() exitrec.Exit) (st Status, recorded bool, err error) {
	if e, err := exitrec.Read(dir); err == nil {
		return StatusOfExit(e), false, nil
	}
	e := settle()
	e.Reason = ReasonShimDied
	e.FinishedAt = time.Now()
	if err := exitrec.Write(dir, e); err != nil {
		return Status{}, false, fmt.Errorf("record exit after its shim died: %w", err)
	}
	return StatusOfExit(e), true, nil
}
