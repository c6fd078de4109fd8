package cri

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/store"
)

// prepareImageVolumes mounts the image volumes among ms (already checked
// by oci.CheckImageMounts) for container rec, named by their index, and
// returns the host path to bind-mount for each: the image's read-only
// view, or the image_sub_path resolved inside it. It records the images
// in rec.ImageVolumes. Releasing rec's rootfs releases them, also when
// this fails half-way. A missing image or sub path is errdefs.ErrNotFound
// naming the field.
func (s *Service) prepareImageVolumes(ctx context.Context, rec *store.Container, ms []*runtimeapi.Mount) (map[int]string, error) {
	var views map[int]string
	for i, m := range ms {
		ref := m.GetImage().GetImage()
		if ref == "" {
			continue
		}
		vol, err := s.opts.Images.PrepareVolume(ctx, rec.ID, strconv.Itoa(i), ref)
		if err != nil {
			return nil, fmt.Errorf("mounts[%d].image %q: %w", i, ref, err)
		}
		src := vol.Path
		if sub := m.GetImageSubPath(); sub != "" {
			if src, err = image.ResolveSubPath(vol.Path, sub); err != nil {
				return nil, fmt.Errorf("mounts[%d].image_sub_path %q of image %s: %w", i, sub, vol.Image.ID, err)
			}
		}
		if views == nil {
			views = map[int]string{}
			rec.ImageVolumes = map[int]string{}
		}
		views[i] = src
		rec.ImageVolumes[i] = vol.Image.ID
	}
	return views, nil
}

// statusMounts returns the config's mounts as ContainerStatus reports
// them: an image volume carries the image it mounts in image.image_ref,
// as the id PullImage returned for it (the CRI: image_ref MUST equal
// Image.id); image.image stays as requested, which is what kubelet's
// image garbage collector matches and what it resolves the volume's
// digest from. ms is not changed.
func (s *Service) statusMounts(rec *store.Container, ms []*runtimeapi.Mount) []*runtimeapi.Mount {
	if len(rec.ImageVolumes) == 0 {
		return ms
	}
	out := make([]*runtimeapi.Mount, len(ms))
	for i, m := range ms {
		ref, ok := rec.ImageVolumes[i]
		if !ok || m.GetImage() == nil {
			out[i] = m
			continue
		}
		// Records from before crind recorded the id hold a repo digest
		// reference: the image, kept while mounted, gives its id.
		if img, err := s.opts.Images.Get(ref); err == nil {
			ref = img.ID
		}
		c := proto.Clone(m).(*runtimeapi.Mount)
		c.Image.ImageRef = ref
		out[i] = c
	}
	return out
}
