package runtime

import (
	"testing"

	"github.com/crin-dev/crin/internal/runtime/exitrec"
)

// RecordShimDied is the one place the exit nobody saw is decided: the
// first record stands, and the settled exit is marked as the shim's death.
func TestRecordShimDied(t *testing.T) {
	dir := t.TempDir()
	settled := 0
	settle := func() exitrec.Exit {
		settled++
		return exitrec.Exit{Pid: 42, ExitCode: 255, Message: "shim 7 died"}
	}
	st, recorded, err := RecordShimDied(dir, settle)
	if err != nil || !recorded {
		t.Fatalf("first call: recorded %v, err %v; want a record", recorded, err)
	}
	if st.State != StateStopped || st.Pid != 42 || st.ExitCode != 255 || st.Reason != ReasonShimDied || st.Message != "shim 7 died" || st.FinishedAt.IsZero() {
		t.Errorf("first call: status %+v, want stopped, pid 42, exit 255, reason %q, the message, a finish time", st, ReasonShimDied)
	}
	e, err := exitrec.Read(dir)
	if err != nil || e.Reason != ReasonShimDied || e.ExitCode != 255 {
		t.Errorf("the record on disk: %+v, %v", e, err)
	}
	// A second caller finds the record and settles nothing.
	st2, recorded, err := RecordShimDied(dir, settle)
	if err != nil || recorded || settled != 1 {
		t.Errorf("second call: recorded %v, err %v, settle ran %d times; want the first record to stand", recorded, err, settled)
	}
	if !st2.FinishedAt.Equal(st.FinishedAt) {
		t.Errorf("second call: finished at %v, want the first record's %v", st2.FinishedAt, st.FinishedAt)
	}

	// The shim's own record, written first, wins over the death.
	own := t.TempDir()
	if err := exitrec.Write(own, exitrec.Exit{Pid: 9, ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	st, recorded, err = RecordShimDied(own, settle)
	if err != nil || recorded || st.ExitCode != 3 || st.Reason != "" {
		t.Errorf("with the shim's own record: status %+v, recorded %v, err %v; want exit 3 as the shim saw it", st, recorded, err)
	}
}
