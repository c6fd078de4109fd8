// Package names checks the simple names crind accepts from its config and
// its clients (QoS classes, volume and container directory names) without
// regexps: a bounded repetition such as ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$
// compiles to max copies of its class, tens of KiB of heap each, held for
// the daemon's life (docs/memory.md).
package names

// Valid reports whether s is 1 to max bytes of [A-Za-z0-9_.-] and, with
// alnumFirst, starts with a letter or digit.
func Valid(s string, max int, alnumFirst bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '_' || c == '.' || c == '-') && (i > 0 || !alnumFirst):
		default:
			return false
		}
	}
	return true
}
