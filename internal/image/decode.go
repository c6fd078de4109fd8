package image

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// acceptedLayerTypes are the layer media types Pull unpacks.
var acceptedLayerTypes = []types.MediaType{
	types.DockerLayer, types.DockerUncompressedLayer,
	types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer,
}

// decodeManifest parses an image manifest (untrusted registry bytes) and
// checks what Pull relies on: a supported media type, sha256 digests, sizes
// that are not negative, layers Pull can unpack, and a config blob no larger
// than maxConfig. An unsupported type is errdefs.ErrNotImplemented, a
// config over the cap errdefs.ErrResourceExhausted, anything else
// malformed errdefs.ErrInvalidArgument; each names the field.
func decodeManifest(raw []byte, maxConfig int64) (*v1.Manifest, error) {
	mf, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse manifest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if mt := mf.MediaType; mt != "" && mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2 {
		return nil, fmt.Errorf("manifest media type %q is not supported: %w", mt, errdefs.ErrNotImplemented)
	}
	if err := checkDescriptor("manifest config", mf.Config); err != nil {
		return nil, err
	}
	if mf.Config.Size > maxConfig {
		return nil, fmt.Errorf("image config %s is %d bytes, over the %d-byte cap (image.max_config_bytes): %w",
			mf.Config.Digest, mf.Config.Size, maxConfig, errdefs.ErrResourceExhausted)
	}
	for i, l := range mf.Layers {
		if err := checkDescriptor(fmt.Sprintf("manifest layers[%d]", i), l); err != nil {
			return nil, err
		}
		if !slices.Contains(acceptedLayerTypes, l.MediaType) {
			return nil, fmt.Errorf("layer %s media type %q is not supported: %w", l.Digest, l.MediaType, errdefs.ErrNotImplemented)
		}
	}
	return mf, nil
}

// checkDescriptor checks the digest and size of a descriptor.
func checkDescriptor(field string, d v1.Descriptor) error {
	if d.Digest.Algorithm != "sha256" || len(d.Digest.Hex) != 64 || !isHex(d.Digest.Hex) {
		return fmt.Errorf("%s digest %q: only sha256 digests are supported: %w", field, d.Digest, errdefs.ErrInvalidArgument)
	}
	if d.Size < 0 {
		return fmt.Errorf("%s size %d is negative: %w", field, d.Size, errdefs.ErrInvalidArgument)
	}
	return nil
}

// decodeConfig parses an image config (untrusted registry bytes) and checks
// that its diff ids are sha256 digests, one per layer of mf. Errors are
// errdefs.ErrInvalidArgument.
func decodeConfig(raw []byte, mf *v1.Manifest) (*v1.ConfigFile, error) {
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse image config %s: %v: %w", mf.Config.Digest, err, errdefs.ErrInvalidArgument)
	}
	if len(cf.RootFS.DiffIDs) != len(mf.Layers) {
		return nil, fmt.Errorf("image config %s lists %d layers, manifest %d: %w",
			mf.Config.Digest, len(cf.RootFS.DiffIDs), len(mf.Layers), errdefs.ErrInvalidArgument)
	}
	for i, d := range cf.RootFS.DiffIDs {
		if d.Algorithm != "sha256" || len(d.Hex) != 64 || !isHex(d.Hex) {
			return nil, fmt.Errorf("image config %s rootfs.diff_ids[%d] %q: only sha256 digests are supported: %w",
				mf.Config.Digest, i, d, errdefs.ErrInvalidArgument)
		}
	}
	return cf, nil
}
