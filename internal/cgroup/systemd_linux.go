package cgroup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// stopTimeout bounds one StopUnit job: systemd kills what is left in the
// unit (SIGTERM, then SIGKILL after the unit's TimeoutStopSec) before
// the job completes.
const stopTimeout = 90 * time.Second

// Units stops units through systemd's manager over D-Bus (the system
// bus, else systemd's private socket). It dials on first use and again
// after a failed call, so a systemd that re-executed is reached anew.
type Units struct {
	// mu guards conn.
	mu   sync.Mutex
	conn *sddbus.Conn
}

// NewUnits returns a Units that has not dialled yet.
func NewUnits() *Units { return &Units{} }

// StopUnit stops unit name and waits for the job; a unit that is not
// loaded is already stopped (success). A unit left failed is reset so
// that its name is free again.
func (s *Units) StopUnit(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return fmt.Errorf("stop unit %s: connect to systemd: %w", name, err)
	}
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, name, "replace", done); err != nil {
		if isNoSuchUnit(err) {
			return nil
		}
		s.drop(conn)
		return fmt.Errorf("stop unit %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			_ = conn.ResetFailedUnitContext(ctx, name)
			if res != "canceled" {
				return fmt.Errorf("stop unit %s: job %s", name, res)
			}
		}
	case <-ctx.Done():
		return fmt.Errorf("stop unit %s: %w", name, ctx.Err())
	}
	_ = conn.ResetFailedUnitContext(ctx, name) // only a failed unit has anything to reset
	return nil
}

// Close closes the connection, if any.
func (s *Units) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

func (s *Units) dial(ctx context.Context) (*sddbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	c, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return nil, err
	}
	s.conn = c
	return c, nil
}

// drop forgets conn after a failed call, so the next one dials again.
func (s *Units) drop(conn *sddbus.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn {
		s.conn.Close()
		s.conn = nil
	}
}

func isNoSuchUnit(err error) bool {
	var de dbus.Error
	if errors.As(err, &de) {
		return de.Name == "org.freedesktop.systemd1.NoSuchUnit"
	}
	var dp *dbus.Error
	return errors.As(err, &dp) && dp.Name == "org.freedesktop.systemd1.NoSuchUnit"
}

// StartScope makes the transient scope unit name in slice and moves pid
// into it, and waits for the job: how a process crind started leaves
// crind's own cgroup for one systemd knows (the scope goes when its
// processes are gone).
func (s *Units) StartScope(ctx context.Context, name, slice string, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return fmt.Errorf("start scope %s: connect to systemd: %w", name, err)
	}
	props := []sddbus.Property{
		sddbus.PropDescription("crin " + name),
		sddbus.PropSlice(slice),
		sddbus.PropPids(uint32(pid)),
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, name, "fail", props, done); err != nil {
		s.drop(conn)
		return fmt.Errorf("start scope %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("start scope %s: job %s", name, res)
		}
	case <-ctx.Done():
		return fmt.Errorf("start scope %s: %w", name, ctx.Err())
	}
	return nil
}
