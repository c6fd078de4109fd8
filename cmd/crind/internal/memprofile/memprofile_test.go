package memprofile

import "testing"

func TestKeep(t *testing.T) {
	tests := []struct {
		name, pprof, godebug string
		want                 bool
	}{
		{name: "unset", want: false},
		{name: "pprof on", pprof: "1", want: true},
		{name: "pprof true", pprof: "true", want: true},
		{name: "pprof off", pprof: "0", want: false},
		{name: "pprof garbage", pprof: "yes please", want: false},
		{name: "godebug rate", godebug: "madvdontneed=1,memprofilerate=4096", want: true},
		{name: "godebug other", godebug: "madvdontneed=1", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Keep(tt.pprof, tt.godebug); got != tt.want {
				t.Errorf("Keep(%q, %q) = %v, want %v", tt.pprof, tt.godebug, got, tt.want)
			}
		})
	}
}
