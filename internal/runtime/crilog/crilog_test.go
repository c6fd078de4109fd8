package crilog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crin-dev/crin/test/poll"
)

func fixedClock() func() time.Time {
	t0 := time.Date(2024, 5, 6, 7, 8, 9, 120000000, time.UTC)
	return func() time.Time { return t0 }
}

const ts = "2024-05-06T07:08:09.120000000Z"

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return nil
	}
	if data[len(data)-1] != '\n' {
		t.Fatalf("log does not end with a newline: %q", data)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func TestLogWriterCopy(t *testing.T) {
	tests := []struct {
		name    string
		stream  string
		input   string
		maxLine int
		want    []string
	}{
		{
			name:   "full lines",
			stream: StreamStdout,
			input:  "hello\nworld\n",
			want:   []string{ts + " stdout F hello", ts + " stdout F world"},
		},
		{
			name:   "empty line kept",
			stream: StreamStderr,
			input:  "a\n\nb\n",
			want:   []string{ts + " stderr F a", ts + " stderr F ", ts + " stderr F b"},
		},
		{
			name:   "last line without newline is partial at close",
			stream: StreamStdout,
			input:  "done\nno newline",
			want:   []string{ts + " stdout F done", ts + " stdout P no newline"},
		},
		{
			name:    "long last line without newline is all partials",
			stream:  StreamStdout,
			input:   "abcdefghij",
			maxLine: 4,
			want: []string{
				ts + " stdout P abcd", ts + " stdout P efgh", ts + " stdout P ij",
			},
		},
		{
			name:    "last line of exactly max without newline is partial",
			stream:  StreamStdout,
			input:   "xy\nabcd",
			maxLine: 4,
			want:    []string{ts + " stdout F xy", ts + " stdout P abcd"},
		},
		{
			name:    "long line split into partials",
			stream:  StreamStdout,
			input:   "abcdefghij\n",
			maxLine: 4,
			want: []string{
				ts + " stdout P abcd", ts + " stdout P efgh", ts + " stdout F ij",
			},
		},
		{
			name:    "line of exactly max is one full record",
			stream:  StreamStdout,
			input:   "abcd\nxy\n",
			maxLine: 4,
			want:    []string{ts + " stdout F abcd", ts + " stdout F xy"},
		},
		{
			name:    "partial then newline at the next read",
			stream:  StreamStdout,
			input:   strings.Repeat("z", 40) + "\n",
			maxLine: 16,
			want: []string{
				ts + " stdout P " + strings.Repeat("z", 16), ts + " stdout P " + strings.Repeat("z", 16),
				ts + " stdout F " + strings.Repeat("z", 8),
			},
		},
		{
			name:   "nothing written",
			stream: StreamStdout,
			input:  "",
			want:   nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.log")
			w, err := Open(path, Options{MaxLine: tc.maxLine, Now: fixedClock()})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Copy(tc.stream, strings.NewReader(tc.input)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, readLines(t, path)); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLogWriterParsesLikeKubelet reassembles the log the way kubelet does
// (timestamp, stream, tag, content; a newline after every F record and
// none after a P one): the output comes back byte for byte, a last line
// without a newline included.
func TestLogWriterParsesLikeKubelet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	w, err := Open(path, Options{MaxLine: 8})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 30)
	if err := w.Copy(StreamStdout, strings.NewReader("short\n"+long+"\ntail")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var got strings.Builder
	for _, l := range readLines(t, path) {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			t.Fatalf("bad record %q", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Fatalf("timestamp %q: %v", f[0], err)
		}
		if f[1] != "stdout" {
			t.Fatalf("stream %q", f[1])
		}
		got.WriteString(f[3])
		switch f[2] {
		case "F":
			got.WriteByte('\n')
		case "P":
		default:
			t.Fatalf("tag %q", f[2])
		}
	}
	if diff := cmp.Diff("short\n"+long+"\ntail", got.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestLogWriterConcurrentStreamsDoNotInterleave(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("o", 3000) + "\n"
	var wg sync.WaitGroup
	for _, s := range []string{StreamStdout, StreamStderr} {
		wg.Go(func() {
			if err := w.Copy(s, strings.NewReader(strings.Repeat(line, 200))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	w.Close()
	lines := readLines(t, path)
	if len(lines) != 400 {
		t.Fatalf("got %d records, want 400", len(lines))
	}
	for _, l := range lines {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 || f[2] != "F" || f[3] != line[:len(line)-1] {
			t.Fatalf("mangled record %.80q", l)
		}
	}
}

func TestLogWriterReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.log")
	w, err := Open(path, Options{Now: fixedClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- w.Copy(StreamStdout, pr) }()

	io.WriteString(pw, "before\n")
	poll.Until(t, 30*time.Second, "the log written", func() (bool, string) {
		fi, err := os.Stat(path)
		return err == nil && fi.Size() > 0, fmt.Sprint(err)
	})
	rotated := filepath.Join(dir, "c.log.1")
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(pw, "after\n")
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ts + " stdout F before"}, readLines(t, rotated)); diff != "" {
		t.Errorf("rotated log (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ts + " stdout F after"}, readLines(t, path)); diff != "" {
		t.Errorf("new log (-want +got):\n%s", diff)
	}
}

func TestLogWriterWriteErrorKeepsDraining(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	var reported []error
	w, err := Open(path, Options{OnError: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	// Break the file under the writer: writes now fail.
	w.f.Close()
	if err := w.Copy(StreamStdout, strings.NewReader("a\nb\nc\n")); err != nil {
		t.Fatalf("Copy stopped on a write error: %v", err)
	}
	if len(reported) != 1 {
		t.Errorf("got %d reported errors, want 1 (the first): %v", len(reported), reported)
	}
}

func TestLogWriterEmptyPathDiscards(t *testing.T) {
	w, err := Open("", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Copy(StreamStdout, strings.NewReader("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
}

// TestLogWriterMaxSize: a writer with MaxSize keeps its log under it by
// itself, one earlier file kept as .1, and no record is split between
// the two.
func TestLogWriterMaxSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "output.log")
	w, err := Open(path, Options{Now: fixedClock(), MaxSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, "line %02d\n", i)
	}
	if err := w.Copy(StreamStdout, strings.NewReader(in.String())); err != nil {
		t.Fatal(err)
	}
	record := func(i int) string { return fmt.Sprintf("%s stdout F line %02d", ts, i) }
	cur, prev := readLines(t, path), readLines(t, path+".1")
	for _, f := range []struct {
		name  string
		lines []string
	}{{"log", cur}, {"log.1", prev}} {
		if n := len(strings.Join(f.lines, "\n")) + 1; n > 200 {
			t.Errorf("%s holds %d bytes, want at most 200", f.name, n)
		}
	}
	// The newest records are in the log, the ones before them in .1, in
	// order and whole.
	all := append(prev, cur...)
	if len(cur) == 0 || len(prev) == 0 {
		t.Fatalf("log %d records, log.1 %d: want both in use", len(cur), len(prev))
	}
	first := 20 - len(all)
	for i, l := range all {
		if l != record(first+i) {
			t.Fatalf("record %d = %q, want %q (log.1 %q, log %q)", i, l, record(first+i), prev, cur)
		}
	}
}

// TestFlushReader: through a FlushReader, a piece of a line that waits for
// its newline is logged as a partial record after the delay, a line
// completed within the delay stays one full record, and Stop ends Copy.
func TestFlushReader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		pieces []string // written one after the other
		want   []string
	}{
		// The first piece is in the log before the second is written.
		{"idle piece", 10 * time.Millisecond, []string{"hel", "lo\n"}, []string{"P hel", "F lo"}},
		{"piece completed in time", time.Hour, []string{"hel", "lo\n", "a\nb", "c\n"}, []string{"F hello", "F a", "F bc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.log")
			w, err := Open(path, Options{Now: fixedClock()})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pw.Close()
			x := NewFlushReader(pr, tc.delay)
			done := make(chan error, 1)
			go func() { done <- w.Copy(StreamStdout, x) }()
			for i, p := range tc.pieces {
				if _, err := io.WriteString(pw, p); err != nil {
					t.Fatal(err)
				}
				if tc.delay < time.Second && i == 0 {
					poll.Until(t, 30*time.Second, "the piece logged", func() (bool, string) {
						b, _ := os.ReadFile(path)
						return strings.Contains(string(b), "P hel"), string(b)
					})
				}
			}
			// Everything written is read before the stop: the last piece
			// ends a line, so the log shows when it is all there.
			poll.Until(t, 30*time.Second, "every line logged", func() (bool, string) {
				b, _ := os.ReadFile(path)
				return strings.Count(string(b), "\n") == len(tc.want), string(b)
			})
			x.Stop(time.Now())
			select {
			case err := <-done:
				if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("Copy after Stop = %v, want the deadline", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Copy did not return after Stop")
			}
			var want []string
			for _, l := range tc.want {
				want = append(want, ts+" stdout "+l)
			}
			if diff := cmp.Diff(want, readLines(t, path)); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
		})
	}
}
