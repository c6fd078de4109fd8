package image

import (
	"regexp"
	"strings"
	"testing"
)

// TestIsDirName checks isDirName against the regexps it replaced.
func TestIsDirName(t *testing.T) {
	res := map[int]*regexp.Regexp{
		64:  regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`),
		128: regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`),
	}
	inputs := []string{
		"", "a", "Z", "0", "abc", "a.b-c_d", ".a", "-a", "_a", "a/b", "a b", "a\x00", "é", "aé",
		"..", "a..", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		strings.Repeat("b", 127), strings.Repeat("b", 128), strings.Repeat("b", 129), "a\n",
	}
	for max, re := range res {
		for _, in := range inputs {
			if got, want := isDirName(in, max), re.MatchString(in); got != want {
				t.Errorf("isDirName(%q, %d) = %v, regexp says %v", in, max, got, want)
			}
		}
	}
}
