package txgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var bucket = []byte("b")

func openDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(bucket); return err }); err != nil {
		t.Fatal(err)
	}
	return db
}

func get(t *testing.T, db *bolt.DB, k string) string {
	t.Helper()
	var v string
	if err := db.View(func(tx *bolt.Tx) error { v = string(tx.Bucket(bucket).Get([]byte(k))); return nil }); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestConcurrentUpdates: many concurrent updates all land, with fewer
// transactions than updates, and the failing ones leave nothing.
func TestConcurrentUpdates(t *testing.T) {
	db := openDB(t)
	c := New(db)
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = c.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucket)
				if err := b.Put([]byte(fmt.Sprint("k", i)), []byte(fmt.Sprint(i))); err != nil {
					return err
				}
				if i%7 == 3 {
					return fmt.Errorf("update %d refused", i)
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		want := ""
		if i%7 == 3 {
			if err == nil || err.Error() != fmt.Sprintf("update %d refused", i) {
				t.Errorf("update %d: err %v, want its own refusal", i, err)
			}
		} else {
			if err != nil {
				t.Errorf("update %d: %v", i, err)
			}
			want = fmt.Sprint(i)
		}
		if got := get(t, db, fmt.Sprint("k", i)); got != want {
			t.Errorf("k%d = %q, want %q", i, got, want)
		}
	}
}

// TestSharedTransaction: updates that queue behind a slow one are committed
// together, in the order they arrived, and a later update sees an earlier
// one's write (a name reserved twice: the second gets the conflict).
func TestSharedTransaction(t *testing.T) {
	db := openDB(t)
	c := New(db)
	release := make(chan struct{})
	first := make(chan error)
	go func() {
		first <- c.Update(func(tx *bolt.Tx) error {
			<-release
			return tx.Bucket(bucket).Put([]byte("first"), []byte("1"))
		})
	}()
	// Wait until the first update leads and blocks in its function.
	for {
		c.mu.Lock()
		busy := c.busy
		c.mu.Unlock()
		if busy {
			break
		}
	}
	var mu sync.Mutex
	ran := map[string][]*bolt.Tx{} // holder -> the transactions it ran in
	reserve := func(holder string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			mu.Lock()
			ran[holder] = append(ran[holder], tx)
			mu.Unlock()
			b := tx.Bucket(bucket)
			if cur := b.Get([]byte("name")); cur != nil && string(cur) != holder {
				return fmt.Errorf("name held by %s", cur)
			}
			return b.Put([]byte("name"), []byte(holder))
		}
	}
	var wg sync.WaitGroup
	res := make([]error, 2)
	queued := func(want int) {
		for {
			c.mu.Lock()
			n := len(c.queue)
			c.mu.Unlock()
			if n == want {
				return
			}
		}
	}
	wg.Go(func() { res[0] = c.Update(reserve("a")) })
	queued(1)
	wg.Go(func() { res[1] = c.Update(reserve("b")) })
	queued(2)
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if res[0] != nil {
		t.Errorf("a: %v", res[0])
	}
	if res[1] == nil || res[1].Error() != "name held by a" {
		t.Errorf("b: %v, want the conflict with a", res[1])
	}
	if got := get(t, db, "name"); got != "a" {
		t.Errorf("name = %q, want a", got)
	}
	if got := get(t, db, "first"); got != "1" {
		t.Errorf("first = %q", got)
	}
	// The two queued updates ran in one transaction; b's failure dropped
	// it, and a ran once more, alone.
	if len(ran["a"]) != 2 || len(ran["b"]) != 1 || ran["a"][0] != ran["b"][0] || ran["a"][1] == ran["a"][0] {
		t.Errorf("transactions run: a %p, b %p; want a and b in one, then a alone", ran["a"], ran["b"])
	}
}

// TestPanic: a panicking update fails alone; the database stays usable.
func TestPanic(t *testing.T) {
	db := openDB(t)
	c := New(db)
	err := c.Update(func(tx *bolt.Tx) error { panic("boom") })
	if err == nil {
		t.Fatal("no error from a panicking update")
	}
	if err := c.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if get(t, db, "k") != "v" {
		t.Fatal("update after a panic lost")
	}
}

// TestCommitError: when the commit itself fails, every update in it gets
// that error.
func TestCommitError(t *testing.T) {
	db := openDB(t)
	c := New(db)
	db.Close()
	err := c.Update(func(tx *bolt.Tx) error { return nil })
	if !errors.Is(err, berrors.ErrDatabaseNotOpen) {
		t.Fatalf("err %v, want ErrDatabaseNotOpen", err)
	}
}
