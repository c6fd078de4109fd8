package cri

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSendChunked(t *testing.T) {
	big := strings.Repeat("x", 300<<10) // four of these exceed a chunk
	mk := func(n int, name string) []*runtimeapi.Container {
		out := make([]*runtimeapi.Container, n)
		for i := range out {
			out[i] = &runtimeapi.Container{Id: name, Labels: map[string]string{"l": big}}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		items      []*runtimeapi.Container
		wantChunks int
	}{
		{"empty list is one empty message", nil, 1},
		{"small list is one message", []*runtimeapi.Container{{Id: "a"}, {Id: "b"}}, 1},
		{"large list is split", mk(10, "c"), 4},
		{"an item over the limit goes alone", []*runtimeapi.Container{{Id: "huge", Labels: map[string]string{"l": strings.Repeat("y", 2<<20)}}, {Id: "small"}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]*runtimeapi.Container
			err := sendChunked(tc.items, func(it []*runtimeapi.Container) *runtimeapi.StreamContainersResponse {
				return &runtimeapi.StreamContainersResponse{Containers: it}
			}, func(r *runtimeapi.StreamContainersResponse) error {
				got = append(got, r.Containers)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.wantChunks {
				t.Fatalf("%d messages, want %d", len(got), tc.wantChunks)
			}
			n := 0
			for _, chunk := range got {
				size := 0
				for _, c := range chunk {
					if c != tc.items[n] {
						t.Fatalf("item %d out of order", n)
					}
					n++
					size += len(c.Labels["l"])
				}
				if len(chunk) > 1 && size > streamChunkBytes {
					t.Errorf("chunk of %d items holds %d bytes, over %d", len(chunk), size, streamChunkBytes)
				}
			}
			if n != len(tc.items) {
				t.Errorf("sent %d items, want %d", n, len(tc.items))
			}
		})
	}
}
