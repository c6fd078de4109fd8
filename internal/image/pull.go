package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"
)

// Pull fetches ref (normalized: "busybox" is docker.io/library/busybox:latest;
// a digest reference pulls by digest) through the configured mirrors and
// unpacks it. Concurrent pulls of the same image are done once.
//
// The error's chain holds its class and nothing else (see
// docs/recovery.md, "Registry faults"):
//   - a bad reference, a malformed manifest or config, a layer entry that
//     would land outside its root (ErrUnsafeEntry) or that no file system
//     can hold (ErrBadEntry): errdefs.ErrInvalidArgument;
//   - no endpoint has the image: errdefs.ErrNotFound, also when a mirror
//     answered 404 and the upstream host could not be reached;
//   - rejected credentials: errdefs.ErrUnauthenticated or
//     errdefs.ErrPermissionDenied;
//   - a host that does not resolve, refuses, times out or stops sending for
//     PullProgressTimeout: errdefs.ErrUnavailable naming it;
//   - content whose digest is not the one asked for: errdefs.ErrDataLoss;
//   - a body over its cap, an image over MaxUnpackedBytes, a full disk, a
//     registry's 429: errdefs.ErrResourceExhausted;
//   - an unsupported media type: errdefs.ErrNotImplemented;
//   - the caller's cancellation or PullTimeout: the context error.
func (s *Service) Pull(ctx context.Context, ref string, auth *Auth) (*Image, error) {
	defer s.fs.changed() // FsInfo measures again
	r, err := parseReference(ref)
	if err != nil {
		return nil, settle(err)
	}
	// Pulls with different credentials are not merged: one caller's bad
	// credentials must not fail another's pull.
	key := r.String() + "\x00" + authKey(auth)
	img, err := s.pulls.do(ctx, s.ctx, &s.wg, key, func(ctx context.Context) (*Image, error) {
		return s.pull(ctx, r, auth)
	})
	if err != nil {
		return nil, settle(err)
	}
	// Every caller of a shared pull gets its own copy.
	return img.clone(), nil
}

func authKey(a *Auth) string {
	if a == nil {
		return ""
	}
	h := sha256.Sum256([]byte(strings.Join([]string{a.Username, a.Password, a.Auth, a.IdentityToken, a.RegistryToken}, "\x00")))
	return hex.EncodeToString(h[:8])
}

func (a *Auth) authenticator() authn.Authenticator {
	if a == nil || *a == (Auth{}) {
		return authn.Anonymous
	}
	return authn.FromConfig(authn.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		Auth:          a.Auth,
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	})
}

// pull runs one pull: resolve the manifest at the first endpoint that has
// it, then fetch and unpack from there. The pull is cancelled when its
// registry stops sending for the progress timeout.
func (s *Service) pull(ctx context.Context, r reference, auth *Auth) (*Image, error) {
	if s.cfg.PullTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.PullTimeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watch := newPullWatch(remote.DefaultTransport, s.cfg.MaxManifestBytes, s.cfg.PullProgressTimeout, cancel)
	defer watch.stop()
	img, err := s.pullFrom(ctx, r, auth, watch)
	if err != nil {
		var stall *stallError
		if errors.As(context.Cause(ctx), &stall) {
			return nil, fmt.Errorf("pull %s: %w", r, stall)
		}
		return nil, err
	}
	return img, nil
}

// pullFrom tries the endpoints of r in order (its mirrors, then its host)
// until one has the image. When none has it, the error names every
// endpoint's failure and has the class of the last definite answer (a 404,
// a 401, ...): a mirror's 404 followed by an upstream that cannot be reached
// (the air-gapped node) is errdefs.ErrNotFound, not ErrUnavailable.
func (s *Service) pullFrom(ctx context.Context, r reference, auth *Auth, watch http.RoundTripper) (*Image, error) {
	start := time.Now()
	var failures []string
	var class error = errdefs.ErrUnknown
	definite := false
	for _, ep := range s.endpoints(r) {
		desc, err := s.resolve(ctx, r, ep, auth, watch)
		if err == nil {
			img, err := s.fetch(ctx, r, desc)
			if err != nil {
				// Drop the layers and blobs of the failed pull no image uses.
				s.collect(ctx)
				return nil, fmt.Errorf("pull %s from %s: %w", r, ep, err)
			}
			s.log.InfoContext(ctx, "image pulled", "ref", r.String(), "image_id", img.ID, "endpoint", ep.String(),
				"duration", time.Since(start).Round(time.Millisecond))
			return img, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pull %s from %s: %w", r, ep, err)
		}
		s.log.DebugContext(ctx, "registry endpoint failed", "ref", r.String(), "endpoint", ep.String(), "error", err)
		failures = append(failures, fmt.Sprintf("%s: %v", ep, err))
		switch c := classOf(err); {
		case !errors.Is(c, errdefs.ErrUnavailable):
			class, definite = c, true
		case !definite:
			class = c
		}
	}
	return nil, &pullError{msg: fmt.Sprintf("pull %s: %s", r, strings.Join(failures, "; ")), class: class}
}

// resolve fetches the manifest or index r names from ep, through watch.
// Errors are classified (see classify).
func (s *Service) resolve(ctx context.Context, r reference, ep endpoint, auth *Auth, watch http.RoundTripper) (*remote.Descriptor, error) {
	rref, err := ep.remoteRef(r)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	// Credentials go to the image's own registry only.
	a := authn.Anonymous
	if !ep.mirror {
		a = auth.authenticator()
	}
	desc, err := remote.Get(rref,
		remote.WithContext(ctx),
		remote.WithTransport(watch),
		remote.WithAuth(a),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3}),
		remote.WithUserAgent("crin"),
	)
	if err != nil {
		return nil, classify(err)
	}
	return desc, nil
}

// fetch downloads what desc describes, unpacks its layers and records the
// image under r.
func (s *Service) fetch(ctx context.Context, r reference, desc *remote.Descriptor) (*Image, error) {
	m, err := s.readManifest(desc)
	if err != nil {
		return nil, err
	}
	layers := make([]v1.Layer, len(m.mf.Layers))
	diffIDs := make([]string, len(m.mf.Layers))
	blobs := []string{m.topDigest, m.manifestDigest, m.id}
	var size uint64
	for i, ld := range m.mf.Layers {
		l, err := m.img.LayerByDigest(ld.Digest)
		if err != nil {
			return nil, classify(err)
		}
		layers[i] = l
		diffIDs[i] = m.cf.RootFS.DiffIDs[i].String()
		blobs = append(blobs, ld.Digest.String())
		size += uint64(max(ld.Size, 0))
	}
	slices.Sort(blobs)
	blobs = slices.Compact(blobs)
	unpin := s.pin(slices.Concat(blobs, diffIDs))
	defer unpin()

	// One failed layer does not cancel the others: fetch returns only once
	// no unpack of this pull is running, so its leftovers can be collected.
	budget := newUnpackBudget(s.cfg.MaxUnpackedBytes)
	var g errgroup.Group
	g.SetLimit(s.cfg.MaxConcurrentDownloads)
	for i := range layers {
		g.Go(func() error {
			return s.ensureLayer(ctx, layers[i], m.mf.Layers[i].Digest.String(), diffIDs[i], budget)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := s.writeManifestBlobs(desc, m); err != nil {
		return nil, err
	}

	rec := &imageRecord{
		Image: Image{
			ID:          m.id,
			RepoDigests: []string{r.repo() + "@" + m.topDigest},
			Size:        size,
			Config:      runtimeConfig(m.cf.Config),
			Layers:      diffIDs,
		},
		Blobs: blobs,
	}
	if r.tag != "" {
		rec.RepoTags = []string{r.String()}
	}
	return s.commit(rec)
}

// fetchedManifest is an image's manifest and config as read from the
// registry, checked, before any of its layers.
type fetchedManifest struct {
	img            v1.Image
	topDigest      string // what the reference resolved to: index or manifest
	manifestDigest string
	rawManifest    []byte
	mf             *v1.Manifest
	id             string // the config's digest
	rawConfig      []byte
	cf             *v1.ConfigFile
}

// readManifest reads and checks the manifest and config desc leads to
// (through an index for this platform).
func (s *Service) readManifest(desc *remote.Descriptor) (*fetchedManifest, error) {
	switch desc.MediaType {
	case types.OCIImageIndex, types.DockerManifestList, types.OCIManifestSchema1, types.DockerManifestSchema2:
	default:
		return nil, fmt.Errorf("manifest media type %q is not supported: %w", desc.MediaType, errdefs.ErrNotImplemented)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, classify(err)
	}
	m := &fetchedManifest{img: img, topDigest: desc.Digest.String()}
	if m.rawManifest, err = img.RawManifest(); err != nil {
		return nil, classify(err)
	}
	manifestDigest, err := img.Digest()
	if err != nil {
		return nil, classify(err)
	}
	m.manifestDigest = manifestDigest.String()
	if m.mf, err = decodeManifest(m.rawManifest, s.cfg.MaxConfigBytes); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", manifestDigest, err)
	}
	if m.rawConfig, err = img.RawConfigFile(); err != nil {
		return nil, classify(err)
	}
	if m.cf, err = decodeConfig(m.rawConfig, m.mf); err != nil {
		return nil, err
	}
	m.id = m.mf.Config.Digest.String()
	return m, nil
}

// writeManifestBlobs stores the index (if desc is one), manifest and config
// of m in the content store.
func (s *Service) writeManifestBlobs(desc *remote.Descriptor, m *fetchedManifest) error {
	if desc.MediaType == types.OCIImageIndex || desc.MediaType == types.DockerManifestList {
		if err := s.writeBlob(m.topDigest, bytes.NewReader(desc.Manifest)); err != nil {
			return err
		}
	}
	if err := s.writeBlob(m.manifestDigest, bytes.NewReader(m.rawManifest)); err != nil {
		return err
	}
	return s.writeBlob(m.id, bytes.NewReader(m.rawConfig))
}

// runtimeConfig copies the fields crin uses from an image config.
func runtimeConfig(c v1.Config) RuntimeConfig {
	rc := RuntimeConfig{
		User:       c.User,
		Env:        slices.Clone(c.Env),
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
		WorkingDir: c.WorkingDir,
		StopSignal: c.StopSignal,
	}
	for v := range c.Volumes {
		rc.Volumes = append(rc.Volumes, v)
	}
	slices.Sort(rc.Volumes)
	if len(c.Labels) > 0 {
		rc.Labels = make(map[string]string, len(c.Labels))
		for k, v := range c.Labels {
			rc.Labels[k] = v
		}
	}
	return rc
}

// commit records rec, merging it with an existing record of the same image
// and moving its tags away from the images that had them.
func (s *Service) commit(rec *imageRecord) (*Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range rec.Layers {
		if _, ok := s.layers[d]; !ok {
			return nil, fmt.Errorf("image %s: layer %s vanished during pull", rec.ID, d)
		}
	}
	if old, ok := s.images[rec.ID]; ok {
		merged := *rec
		merged.RepoTags = mergeSorted(old.RepoTags, rec.RepoTags)
		merged.RepoDigests = mergeSorted(old.RepoDigests, rec.RepoDigests)
		merged.Blobs = mergeSorted(old.Blobs, rec.Blobs)
		rec = &merged
	}
	changed := map[string]*imageRecord{rec.ID: rec}
	for _, t := range rec.RepoTags {
		prevID, ok := s.refs[t]
		if !ok || prevID == rec.ID {
			continue
		}
		prev := changed[prevID]
		if prev == nil {
			cp := *s.images[prevID]
			prev = &cp
		}
		prev.RepoTags = slices.DeleteFunc(slices.Clone(prev.RepoTags), func(x string) bool { return x == t })
		changed[prevID] = prev
	}
	if err := s.update(func(tx *bolt.Tx) error {
		for id, c := range changed {
			if err := put(tx, bucketImages, id, c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("record image %s: %w", rec.ID, err)
	}
	for id, c := range changed {
		s.images[id] = c
	}
	for _, ref := range slices.Concat(rec.RepoTags, rec.RepoDigests) {
		s.refs[ref] = rec.ID
	}
	return rec.public(), nil
}

func mergeSorted(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// ensureLayer makes sure the layer with diffID is unpacked, downloading its
// blob if needed. Concurrent calls for one layer unpack it once.
func (s *Service) ensureLayer(ctx context.Context, l v1.Layer, digest, diffID string, budget *unpackBudget) error {
	for attempt := 0; ; attempt++ {
		_, err := s.unpack.do(ctx, s.ctx, &s.wg, diffID, func(uctx context.Context) (struct{}, error) {
			return struct{}{}, s.unpackOnce(uctx, l, digest, diffID, budget)
		})
		// The call may have been another pull's that was cancelled; retry
		// once on our own behalf.
		if err != nil && attempt == 0 && errors.Is(err, context.Canceled) && ctx.Err() == nil && s.ctx.Err() == nil {
			continue
		}
		return err
	}
}

// unpackOnce downloads and unpacks one layer unless it is already there.
func (s *Service) unpackOnce(ctx context.Context, l v1.Layer, digest, diffID string, budget *unpackBudget) error {
	s.mu.Lock()
	_, ok := s.layers[diffID]
	s.mu.Unlock()
	if ok {
		return nil
	}
	if !s.hasBlob(digest) {
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("fetch layer %s: %w", digest, classify(err))
		}
		err = s.writeBlob(digest, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("fetch layer %s: %w", digest, err)
		}
	}
	dir, err := s.reserveDir(diffID)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			s.mu.Lock()
			delete(s.dirs, dir)
			s.mu.Unlock()
		}
	}()
	blob, _ := s.blobPath(digest)
	tmp, err := os.MkdirTemp(filepath.Join(s.root, "l"), ".tmp-")
	if err != nil {
		return fmt.Errorf("unpack layer %s: %w", diffID, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	start := time.Now()
	if err := unpackBlob(ctx, blob, diffID, tmp, unpackOptions{log: s.log, budget: budget}); err != nil {
		return fmt.Errorf("unpack layer %s: %w", diffID, err)
	}
	final := filepath.Join(s.root, "l", dir)
	if err := os.RemoveAll(final); err != nil {
		return fmt.Errorf("unpack layer %s: %w", diffID, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("unpack layer %s: %w", diffID, err)
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := &layerRecord{Dir: dir}
	if err := s.update(func(tx *bolt.Tx) error { return put(tx, bucketLayers, diffID, rec) }); err != nil {
		return fmt.Errorf("record layer %s: %w", diffID, err)
	}
	s.layers[diffID] = rec
	committed = true
	s.log.DebugContext(ctx, "layer unpacked", "diff_id", diffID, "dir", dir, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// reserveDir picks a short, unused name under Root/l for diffID: short so
// that the overlay options of a many-layer image fit in a page.
func (s *Service) reserveDir(diffID string) (string, error) {
	hexPart, ok := strings.CutPrefix(diffID, "sha256:")
	if !ok || len(hexPart) != 64 || !isHex(hexPart) {
		return "", fmt.Errorf("diff id %q: only sha256 digests are supported: %w", diffID, errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := 12; n <= 64; n += 4 {
		if _, taken := s.dirs[hexPart[:n]]; !taken {
			s.dirs[hexPart[:n]] = diffID
			return hexPart[:n], nil
		}
	}
	return "", fmt.Errorf("layer %s: no free directory name", diffID)
}
