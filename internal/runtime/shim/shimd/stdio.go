package shimd

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// stdio is the container's input side as the shim holds it: the write end
// of its stdin pipe, or the master of its terminal. The shim keeps it open
// for the container's whole life, so the container sees no end of input
// while nobody is attached, nor while crind restarts.
type stdio struct {
	in   *os.File // where input goes; nil when the container has no stdin
	term *os.File // the terminal's master; nil without a terminal
	// once is stdin_once: only the first attach session that asks for
	// stdin gets it, and its end closes the container's stdin.
	once bool
	// resize sets the terminal's size (TIOCSWINSZ on term); eof ends the
	// input of a terminal, which cannot be closed on its own.
	resize func(width, height uint16) error
	eof    func() error

	// mu guards claimed and closed.
	mu      sync.Mutex
	claimed bool // stdin_once: a session has been given stdin
	closed  bool // the container's stdin was closed
}

// errNoStdin reports input for a container whose stdin is closed or absent.
var errNoStdin = errors.New("container stdin is closed")

// session registers an attach session. It reports whether the session's
// input goes to the container (it asked for stdin, the container has one
// and it is still open, and stdin_once has not given it away) and whether
// the session's end must close the container's stdin.
func (s *stdio) session(wantStdin bool) (gets, closesAtEnd bool) {
	if s == nil || s.in == nil || !wantStdin {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || (s.once && s.claimed) {
		return false, false
	}
	if s.once {
		s.claimed = true
		return true, true
	}
	return true, false
}

// hasTerminal reports whether the container runs on a terminal.
func (s *stdio) hasTerminal() bool {
	return s != nil && s.term != nil
}

// write forwards input to the container. It may block while the container
// does not read; closing the stdin unblocks it.
func (s *stdio) write(p []byte) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errNoStdin
	}
	if _, err := s.in.Write(p); err != nil {
		return fmt.Errorf("write container stdin: %w", err)
	}
	return nil
}

// setSize resizes the container's terminal.
func (s *stdio) setSize(width, height uint16) error {
	if !s.hasTerminal() || s.resize == nil {
		return errors.New("container has no terminal")
	}
	return s.resize(width, height)
}

// closeInput ends the container's input: a pipe is closed (the container
// reads EOF); a terminal gets its end-of-file character, since closing the
// master would hang the terminal up, output included. Later sessions get
// no stdin. Closing twice is a no-op.
func (s *stdio) closeInput() error {
	if s == nil || s.in == nil {
		return nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.term != nil {
		if s.eof != nil {
			return s.eof()
		}
		return nil
	}
	// Close interrupts a write blocked on a full pipe.
	return s.in.Close()
}

// release closes what the shim holds once the container is gone.
func (s *stdio) release() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.in != nil && s.in != s.term {
		_ = s.in.Close()
	}
}
