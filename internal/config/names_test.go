package config

import (
	"regexp"
	"strings"
	"testing"
)

// TestIsName checks isName against the regexps it replaced.
func TestIsName(t *testing.T) {
	tests := []struct {
		re         *regexp.Regexp
		max        int
		alnumFirst bool
	}{
		{regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`), 63, true},
		{regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`), 64, false},
	}
	inputs := []string{
		"", "a", "Z", "0", "abc", "a.b-c_d", ".a", "-a", "_a", ".", "..", "a/b", "a b", "a\x00", "é", "aé", "a\n",
		strings.Repeat("a", 62), strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		"-" + strings.Repeat("a", 63), "-" + strings.Repeat("a", 64),
	}
	for _, tt := range tests {
		for _, in := range inputs {
			if got, want := isName(in, tt.max, tt.alnumFirst), tt.re.MatchString(in); got != want {
				t.Errorf("isName(%q, %d, %v) = %v, %s says %v", in, tt.max, tt.alnumFirst, got, tt.re, want)
			}
		}
	}
}
