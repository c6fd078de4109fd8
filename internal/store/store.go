// Package store persists crind's pods, containers and name reservations in a
// bbolt database, so that a restarted crind can rebuild its state. Every
// write is all in one transaction, which concurrent writes may share
// (package txgroup): a crash leaves either the old or the new record, and
// a write returns once its record is on disk.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"

	"github.com/crin-dev/crin/internal/headroom"
	"github.com/crin-dev/crin/internal/txgroup"
)

var (
	bucketSandboxes  = []byte("sandboxes")
	bucketContainers = []byte("containers")
	bucketNames      = []byte("names")
	bucketCleanups   = []byte("cleanups")
	// bucketSpecs holds each container's final OCI spec, written once
	// (PutContainer): its record is rewritten at every state change.
	bucketSpecs = []byte("specs")
)

// Kind says which name space a reservation lives in.
type Kind string

// The reservation kinds.
const (
	KindSandbox   Kind = "sandbox"
	KindContainer Kind = "container"
)

// Store is the bbolt-backed record store. Its methods are safe for
// concurrent use.
type Store struct {
	db *bolt.DB
	// tx commits concurrent writes together (see txgroup): a burst of
	// pod starts shares its fdatasyncs.
	tx *txgroup.Committer
	// room keeps disk space allocated for the database's growth, so
	// that stop and remove can be recorded on a full disk.
	room *headroom.Room
}

// Option configures Open.
type Option func(*options)

type options struct {
	log *slog.Logger
}

// WithLogger has the store log to l (by default it logs nothing): it
// says when it cannot keep space for the database's growth, and when it
// can again.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Open opens (creating) the database at path. The database keeps
// headroom.DefaultRoom bytes of disk allocated past its end, taken while
// there is room, so that commits, a removal's first, still work once the
// filesystem is full (docs/recovery.md, "Full disk").
func Open(path string, opts ...Option) (*Store, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketContainers, bucketNames, bucketCleanups, bucketSpecs} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init store %s: %w", path, err)
	}
	s := &Store{db: db, tx: txgroup.New(db), room: headroom.NewRoom(path, 0, o.log)}
	s.room.Keep()
	return s, nil
}

// update commits fn (sharing the commit with concurrent ones) and then
// takes back the disk space the commit's growth used, when it can.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	err := s.tx.Update(fn)
	s.room.Keep()
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// NameConflictError says a name is held by another object.
type NameConflictError struct {
	Kind   Kind
	Name   string
	Holder string
}

func (e *NameConflictError) Error() string {
	return fmt.Sprintf("%s name %q is reserved for %s %s", e.Kind, e.Name, e.Kind, e.Holder)
}

// Unwrap classifies the conflict as errdefs.ErrAlreadyExists.
func (e *NameConflictError) Unwrap() error { return errdefs.ErrAlreadyExists }

func nameKey(k Kind, name string) []byte { return []byte(string(k) + "/" + name) }

// Reserve records that name belongs to id. Reserving a name for the id that
// holds it is a no-op; another holder is a *NameConflictError.
func (s *Store) Reserve(k Kind, name, id string) error {
	return s.update(func(tx *bolt.Tx) error { return reserve(tx, k, name, id) })
}

func reserve(tx *bolt.Tx, k Kind, name, id string) error {
	b := tx.Bucket(bucketNames)
	if cur := b.Get(nameKey(k, name)); cur != nil {
		if string(cur) == id {
			return nil
		}
		return &NameConflictError{Kind: k, Name: name, Holder: string(cur)}
	}
	return b.Put(nameKey(k, name), []byte(id))
}

// ReserveSandbox reserves r.Name for r.ID, as Reserve does, and writes r,
// in one transaction (one write to disk): a name conflict writes nothing.
func (s *Store) ReserveSandbox(r *Sandbox) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", bucketSandboxes, r.ID, err)
	}
	return s.update(func(tx *bolt.Tx) error {
		if err := reserve(tx, KindSandbox, r.Name, r.ID); err != nil {
			return err
		}
		return tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b)
	})
}

// ReserveContainer is ReserveSandbox for a container record (which is
// written as PutContainer writes it).
func (s *Store) ReserveContainer(r *Container) error {
	return s.putContainer(r, func(tx *bolt.Tx) error { return reserve(tx, KindContainer, r.Name, r.ID) })
}

// Release frees name if id holds it.
func (s *Store) Release(k Kind, name, id string) error {
	return s.update(func(tx *bolt.Tx) error { return release(tx, k, name, id) })
}

func release(tx *bolt.Tx, k Kind, name, id string) error {
	b := tx.Bucket(bucketNames)
	if cur := b.Get(nameKey(k, name)); cur != nil && string(cur) == id {
		return b.Delete(nameKey(k, name))
	}
	return nil
}

// RemoveSandbox deletes sandbox id's record and frees name if id holds
// it, in one transaction (one write to disk).
func (s *Store) RemoveSandbox(id, name string) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSandboxes).Delete([]byte(id)); err != nil {
			return err
		}
		return release(tx, KindSandbox, name, id)
	})
}

// RemoveContainer deletes container id's record and spec and frees name
// if id holds it, in one transaction.
func (s *Store) RemoveContainer(id, name string) error {
	return s.update(func(tx *bolt.Tx) error {
		if err := deleteContainer(tx, id); err != nil {
			return err
		}
		return release(tx, KindContainer, name, id)
	})
}

// Reservations returns every reservation of kind k as name → id.
func (s *Store) Reservations(k Kind) (map[string]string, error) {
	out := map[string]string{}
	prefix := string(k) + "/"
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketNames).ForEach(func(key, v []byte) error {
			if len(key) > len(prefix) && string(key[:len(prefix)]) == prefix {
				out[string(key[len(prefix):])] = string(v)
			}
			return nil
		})
	})
	return out, err
}

func put(s *Store, bucket []byte, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", bucket, id, err)
	}
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(id), b)
	})
}

func del(s *Store, bucket []byte, id string) error {
	return s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(id))
	})
}

func all[T any](db *bolt.DB, bucket []byte) ([]*T, error) {
	var out []*T
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			r := new(T)
			if err := json.Unmarshal(v, r); err != nil {
				return fmt.Errorf("decode %s %s: %w", bucket, k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// PutSandbox writes (creates or replaces) a sandbox record.
func (s *Store) PutSandbox(r *Sandbox) error { return put(s, bucketSandboxes, r.ID, r) }

// DeleteSandbox removes a sandbox record; a missing one is not an error.
func (s *Store) DeleteSandbox(id string) error { return del(s, bucketSandboxes, id) }

// Sandboxes returns every sandbox record.
func (s *Store) Sandboxes() ([]*Sandbox, error) { return all[Sandbox](s.db, bucketSandboxes) }

// PutContainer writes (creates or replaces) a container record. Its Spec,
// when set, goes to a bucket of its own in the same transaction, and the
// record is written without it: a caller sets Spec for the one write that
// stores it and then lets it go (ContainerSpec reads it back), so the
// records it rewrites at each state change stay small, and so does its
// memory.
func (s *Store) PutContainer(r *Container) error { return s.putContainer(r, nil) }

// putContainer writes r, after first in the same transaction, if set.
func (s *Store) putContainer(r *Container, first func(*bolt.Tx) error) error {
	rec := *r
	rec.Spec = nil
	b, err := json.Marshal(&rec)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", bucketContainers, r.ID, err)
	}
	return s.update(func(tx *bolt.Tx) error {
		if first != nil {
			if err := first(tx); err != nil {
				return err
			}
		}
		if len(r.Spec) > 0 {
			if err := tx.Bucket(bucketSpecs).Put([]byte(r.ID), r.Spec); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketContainers).Put([]byte(r.ID), b)
	})
}

// ContainerSpec returns container id's spec as PutContainer stored it
// (a record written before specs had a bucket carries its own, and
// Containers returns it there); nil when it has none.
func (s *Store) ContainerSpec(id string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketSpecs).Get([]byte(id)); v != nil {
			out = append([]byte(nil), v...)
		}
		return nil
	})
	return out, err
}

// DeleteContainer removes a container record and its spec; a missing one
// is not an error.
func (s *Store) DeleteContainer(id string) error {
	return s.update(func(tx *bolt.Tx) error { return deleteContainer(tx, id) })
}

func deleteContainer(tx *bolt.Tx, id string) error {
	if err := tx.Bucket(bucketSpecs).Delete([]byte(id)); err != nil {
		return err
	}
	return tx.Bucket(bucketContainers).Delete([]byte(id))
}

// Containers returns every container record.
func (s *Store) Containers() ([]*Container, error) { return all[Container](s.db, bucketContainers) }

// ErrCorrupt marks a record that cannot be decoded.
var ErrCorrupt = errors.New("corrupt record")
