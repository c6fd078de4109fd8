package image

// isDirName reports whether s is 1 to max bytes of [A-Za-z0-9_.-] starting
// with a letter or digit: a name that is safe as one directory name. It
// replaces the regexp ^[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}$, whose bounded
// repetition compiles to max copies of the class (about 90 KiB of heap
// for max 128, held for the daemon's life; docs/memory.md).
func isDirName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '_' || c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
