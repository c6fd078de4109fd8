// Package txgroup commits concurrent updates of a bbolt database together:
// an update that arrives while another transaction is being written waits
// for it and then goes to disk in one transaction with every other update
// that waited, so a burst of N pod starts costs a handful of fdatasyncs
// instead of N times the few each one makes. An update that finds the
// database idle is committed at once, as bolt.DB.Update would: nothing
// waits for company (bolt.DB.Batch waits up to its MaxBatchDelay, which
// would add that to every lone CRI call).
//
// Each update keeps its own outcome. An update whose function fails is
// rolled back alone: the transaction is dropped and the others run again,
// in the same order, without it, so each function must do nothing but
// read and write through its transaction (it may run more than once). Its
// error is what it would have got had it run alone after those before it.
package txgroup

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Committer runs the updates of one database. Its zero value is not
// usable; see New.
type Committer struct {
	db *bolt.DB

	mu sync.Mutex
	// queue holds the updates that wait for the next transaction.
	queue []*update
	// busy is true while an update leads: takes the queue and commits it.
	busy bool
}

type update struct {
	fn  func(*bolt.Tx) error
	err error
	// wake gets true when the update is to lead the next transaction
	// itself, false when a leader committed it (err is then final).
	wake chan bool
}

// New returns a Committer for db.
func New(db *bolt.DB) *Committer { return &Committer{db: db} }

// Update runs fn in a read-write transaction, possibly shared with other
// concurrent updates, and returns once that transaction is on disk (or
// failed). fn's error, or the commit's, is returned.
func (c *Committer) Update(fn func(*bolt.Tx) error) error {
	u := &update{fn: fn, wake: make(chan bool, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, u)
	if c.busy {
		c.mu.Unlock()
		if lead := <-u.wake; !lead {
			return u.err
		}
		c.mu.Lock()
	}
	// u leads: it commits everything queued so far, itself included.
	c.busy = true
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()

	c.commit(batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		// The next leader is the oldest waiter; busy stays set so that
		// nobody else starts a transaction meanwhile.
		c.queue[0].wake <- true
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	for _, b := range batch {
		if b != u {
			b.wake <- false
		}
	}
	return u.err
}

// errDropped rolls back a shared transaction in which one update failed.
var errDropped = errors.New("txgroup: an update failed; the others run again")

// commit runs batch in as few transactions as its failures allow and sets
// each update's err.
func (c *Committer) commit(batch []*update) {
	batch = slices.Clone(batch)
	for len(batch) > 0 {
		failed := -1
		err := c.db.Update(func(tx *bolt.Tx) error {
			for i, u := range batch {
				if err := run(u.fn, tx); err != nil {
					u.err, failed = err, i
					return errDropped
				}
			}
			return nil
		})
		if failed < 0 {
			// Committed (err nil) or the commit itself failed: the same
			// for every update in it.
			for _, u := range batch {
				u.err = err
			}
			return
		}
		batch = slices.Delete(batch, failed, failed+1)
	}
}

// run calls fn, turning a panic into its error: a panicking update must
// not leave the others waiting for a leader that is gone.
func run(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("txgroup: update panicked: %v", r)
		}
	}()
	return fn(tx)
}
