package oci

import (
	"fmt"
	"path/filepath"
	"slices"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CheckImageMounts validates the image volumes among ms (the mounts whose
// image is set; kubelet's ImageVolume feature): they are read-only, have
// no host_path, and an image_sub_path, if any, is a relative path that
// stays inside the image. A mount without an image must not have an
// image_sub_path. Bad input is errdefs.ErrInvalidArgument naming the field.
// Call it before preparing the volumes, so a bad request mounts nothing.
func CheckImageMounts(ms []*runtimeapi.Mount) error {
	for i, m := range ms {
		field := fmt.Sprintf("mounts[%d]", i)
		ref, sub := m.GetImage().GetImage(), m.GetImageSubPath()
		if ref == "" {
			if sub != "" {
				return invalidf("%s.image_sub_path %q: set without an image", field, sub)
			}
			continue
		}
		if hp := m.GetHostPath(); hp != "" {
			return invalidf("%s.host_path %q: must be empty when %s.image is set", field, hp, field)
		}
		if !m.GetReadonly() {
			return invalidf("%s.readonly: must be true: image volumes (%s.image %q) are read-only", field, field, ref)
		}
		if sub != "" && !filepath.IsLocal(sub) {
			return invalidf("%s.image_sub_path %q: must be a relative path inside the image, without \"..\"", field, sub)
		}
	}
	return nil
}

// imageVolumeMounts returns ms with every image volume turned into a bind
// mount of its prepared view, views[i] for ms[i] (the sub path already
// resolved in it). ms is not changed.
func imageVolumeMounts(ms []*runtimeapi.Mount, views map[int]string) ([]*runtimeapi.Mount, error) {
	if err := CheckImageMounts(ms); err != nil {
		return nil, err
	}
	var out []*runtimeapi.Mount // a copy, made at the first image volume
	for i, m := range ms {
		ref := m.GetImage().GetImage()
		if ref == "" {
			continue
		}
		src, ok := views[i]
		if !ok || !filepath.IsAbs(src) {
			return nil, invalidf("mounts[%d].image %q: the image volume was not prepared", i, ref)
		}
		if out == nil {
			out = slices.Clone(ms)
		}
		b := proto.Clone(m).(*runtimeapi.Mount)
		b.Image, b.ImageSubPath, b.HostPath = nil, "", src
		out[i] = b
	}
	if out == nil {
		return ms, nil
	}
	return out, nil
}
