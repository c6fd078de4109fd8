package main

import (
	"testing"

	"github.com/crin-dev/crin/internal/config"
)

func TestGoRuntimeFrom(t *testing.T) {
	tests := []struct {
		name      string
		gcPercent int
		limit     int64
		env       map[string]string
		want      goRuntime
	}{
		{name: "defaults", gcPercent: config.DefaultGCPercent,
			want: goRuntime{gcPercent: config.DefaultGCPercent, setGCPercent: true}},
		{name: "both set", gcPercent: 25, limit: 32 << 20,
			want: goRuntime{gcPercent: 25, setGCPercent: true, memoryLimit: 32 << 20, setLimit: true}},
		{name: "zeros keep go defaults", want: goRuntime{}},
		{name: "GOGC wins", gcPercent: 50, limit: 32 << 20, env: map[string]string{"GOGC": "200"},
			want: goRuntime{memoryLimit: 32 << 20, setLimit: true}},
		{name: "GOMEMLIMIT wins", gcPercent: 50, limit: 32 << 20, env: map[string]string{"GOMEMLIMIT": "1GiB"},
			want: goRuntime{gcPercent: 50, setGCPercent: true}},
		{name: "empty env is unset", gcPercent: 50, env: map[string]string{"GOGC": ""},
			want: goRuntime{gcPercent: 50, setGCPercent: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.GoRuntime{GCPercent: tt.gcPercent, MemoryLimitBytes: tt.limit}
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			if got := goRuntimeFrom(cfg, lookup); got != tt.want {
				t.Errorf("goRuntimeFrom = %+v, want %+v", got, tt.want)
			}
		})
	}
}
