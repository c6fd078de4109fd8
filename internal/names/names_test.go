package names

import (
	"regexp"
	"strings"
	"testing"
)

// TestValid checks Valid against the regexps it replaced in internal/config
// and internal/image.
func TestValid(t *testing.T) {
	tests := []struct {
		re         *regexp.Regexp
		max        int
		alnumFirst bool
	}{
		{regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`), 63, true},
		{regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`), 64, false},
		{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`), 64, true},
		{regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`), 128, true},
	}
	inputs := []string{
		"", "a", "Z", "0", "abc", "a.b-c_d", ".a", "-a", "_a", ".", "..", "a..", "a/b", "a b", "a\x00", "é", "aé", "a\n",
		strings.Repeat("a", 62), strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		"-" + strings.Repeat("a", 63), "-" + strings.Repeat("a", 64),
		strings.Repeat("b", 127), strings.Repeat("b", 128), strings.Repeat("b", 129),
	}
	for _, tt := range tests {
		for _, in := range inputs {
			if got, want := Valid(in, tt.max, tt.alnumFirst), tt.re.MatchString(in); got != want {
				t.Errorf("Valid(%q, %d, %v) = %v, %s says %v", in, tt.max, tt.alnumFirst, got, tt.re, want)
			}
		}
	}
}
