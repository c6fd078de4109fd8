// Package image pulls images from OCI registries, stores their blobs by
// digest, unpacks each layer once, and mounts container rootfs as overlays.
//
// Layout under Config.Root (0700):
//
//	meta.db                 bbolt: image records, unpacked layers, rootfs leases
//	blobs/sha256/<hex>      manifests, configs and compressed layers, by digest
//	blobs/tmp/              downloads in progress
//	l/<short>/              one unpacked layer per diff id (overlay lower dir)
//	containers/<id>/        upper, work and rootfs (the overlay mountpoint)
//	containers/<id>/volumes/<name>/  read-only overlays of image volumes
//
// Every write is made crash-safe by writing to a temporary name and renaming
// into place; metadata is committed last, and New removes whatever a crash
// left unreferenced.
package image

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"

	"github.com/crin-dev/crin/internal/headroom"
	"github.com/crin-dev/crin/internal/topdir"
	"github.com/crin-dev/crin/internal/txgroup"
)

// Config configures the image service.
type Config struct {
	Root string // everything lives under Root (0700)
	// Mirrors maps a registry host (e.g. "docker.io") to endpoints tried in
	// order before the host itself.
	Mirrors map[string][]Endpoint
	// PlainHTTP lists registry hosts (host[:port]) reached over plain http.
	PlainHTTP []string
	// PullTimeout bounds one pull (0 = none beyond the caller's ctx).
	PullTimeout time.Duration
	// MaxConcurrentDownloads bounds layer downloads of one pull.
	MaxConcurrentDownloads int
	// MaxManifestBytes caps the body of one manifest or index (0: 4 MiB).
	// A larger one fails the pull with errdefs.ErrResourceExhausted before
	// more than the cap is read.
	MaxManifestBytes int64
	// MaxConfigBytes caps one image config blob (0: 4 MiB), like
	// MaxManifestBytes.
	MaxConfigBytes int64
	// MaxUnpackedBytes caps the bytes the layers one pull unpacks may
	// expand to, counting file content and 512 bytes per entry (0: no cap). Going over fails the pull with
	// errdefs.ErrResourceExhausted and removes the partial unpack.
	MaxUnpackedBytes int64
	// PullProgressTimeout cancels a pull whose registry sends nothing for
	// this long while the pull waits for it (0: no such bound). The pull
	// fails with errdefs.ErrUnavailable and its partial blobs are removed.
	PullProgressTimeout time.Duration
	Logger              *slog.Logger
}

// Endpoint is a mirror: a URL with scheme, host and optional path prefix,
// e.g. "http://127.0.0.1:5000/cache". The pulled repository path is kept:
// docker.io/library/busybox is fetched from <prefix>/library/busybox.
// Credentials of a pull are sent to the image's own registry only; mirrors
// are reached anonymously.
type Endpoint struct {
	URL string
}

// Auth are registry credentials from a CRI PullImage request.
type Auth struct {
	Username      string
	Password      string
	Auth          string // base64 user:password
	IdentityToken string
	RegistryToken string
}

// Image is a pulled image.
type Image struct {
	ID          string   // config digest, "sha256:..."
	RepoTags    []string // normalized, e.g. "docker.io/library/busybox:latest"
	RepoDigests []string // e.g. "docker.io/library/busybox@sha256:..."
	Size        uint64   // sum of compressed layer sizes
	Config      RuntimeConfig
	Layers      []string // diff ids, bottom first
}

// RuntimeConfig is the runtime config of an image (untrusted input).
// Its first five fields are oci.ImageConfig, the part a container spec
// uses; the cri hub copies them across, as internal/oci does not import
// this package (spec building stays free of the image store). A field
// added to one that a spec needs goes into both.
type RuntimeConfig struct {
	User       string
	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
	StopSignal string
	Volumes    []string
	Labels     map[string]string
}

// FsUsage is the usage of the image filesystem.
type FsUsage struct {
	Mountpoint string
	UsedBytes  uint64
	InodesUsed uint64
}

// Defaults of the Config fields left zero.
const (
	defaultDownloads     = 3
	defaultMaxManifest   = 4 << 20
	defaultMaxConfigBlob = 4 << 20
)

// Service is the image store. Its methods are safe for concurrent use.
type Service struct {
	cfg  Config
	log  *slog.Logger
	root string
	db   *bolt.DB
	tx   *txgroup.Committer // db's writes
	// room keeps disk space for db's growth, so that removals are
	// recorded on a full disk (package headroom).
	room    *headroom.Room
	mirrors map[string][]endpoint

	// ctx bounds the pulls and unpacks run on behalf of callers; Close
	// cancels it and waits for them through wg.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pulls  flightGroup[*Image]
	unpack flightGroup[struct{}]

	// mu guards the fields below, and serializes metadata commits with
	// garbage collection. It is never held across a network call or an
	// unpack.
	mu     sync.Mutex
	images map[string]*imageRecord // by id
	refs   map[string]string       // repo tag or repo digest -> id
	layers map[string]*layerRecord // by diff id
	dirs   map[string]string       // layer dir name -> diff id, committed or being unpacked
	leases map[string]*leaseRecord // rootfs by container id
	// volumes are the image volumes of containers, by volumeKey.
	volumes map[string]*volumeRecord
	pins    map[string]int // digests and diff ids used by pulls in progress

	// fs caches usage figures for FsInfo (fsinfo.go).
	fs fsCache
}

// New opens (creating if needed) the image store under cfg.Root.
// A bad configuration is errdefs.ErrInvalidArgument.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Root == "" {
		return nil, fmt.Errorf("image root is empty: %w", errdefs.ErrInvalidArgument)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("image root %q: %w", cfg.Root, err)
	}
	// The overlay mount options separate paths with ':' and ','.
	if strings.ContainsAny(root, ":,\\") {
		return nil, fmt.Errorf("image root %q: must not contain ':', ',' or '\\': %w", root, errdefs.ErrInvalidArgument)
	}
	if cfg.MaxConcurrentDownloads <= 0 {
		cfg.MaxConcurrentDownloads = defaultDownloads
	}
	if cfg.MaxManifestBytes <= 0 {
		cfg.MaxManifestBytes = defaultMaxManifest
	}
	if cfg.MaxConfigBytes <= 0 {
		cfg.MaxConfigBytes = defaultMaxConfigBlob
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mirrors := map[string][]endpoint{}
	for host, eps := range cfg.Mirrors {
		for _, e := range eps {
			ep, err := parseEndpoint(e.URL)
			if err != nil {
				return nil, fmt.Errorf("mirrors of %s: %w", host, err)
			}
			mirrors[host] = append(mirrors[host], ep)
		}
	}
	for _, d := range []string{root, filepath.Join(root, "blobs", "sha256"), filepath.Join(root, "blobs", "tmp"),
		filepath.Join(root, "l"), filepath.Join(root, "containers")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// One dir per layer and per container rootfs: spread them over the
	// disk (package topdir). Only speed is lost when it fails.
	for _, d := range []string{filepath.Join(root, "l"), filepath.Join(root, "containers")} {
		if err := topdir.Mark(d); err != nil {
			log.WarnContext(ctx, "mark top dir", "dir", d, "error", err)
		}
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("chmod %s: %w", root, err)
	}
	db, err := bolt.Open(filepath.Join(root, "meta.db"), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open image metadata in %s: %w", root, err)
	}
	// The store outlives the request that opened it but not crind.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Service{
		cfg: cfg, log: log, root: root, db: db, tx: txgroup.New(db), mirrors: mirrors,
		room: headroom.NewRoom(filepath.Join(root, "meta.db"), 0, log),
		ctx:  ctx, cancel: cancel,
		images:  map[string]*imageRecord{},
		refs:    map[string]string{},
		layers:  map[string]*layerRecord{},
		dirs:    map[string]string{},
		leases:  map[string]*leaseRecord{},
		volumes: map[string]*volumeRecord{},
		pins:    map[string]int{},
	}
	s.room.Keep()
	if err := s.load(); err != nil {
		cancel()
		_ = db.Close()
		return nil, err
	}
	if err := s.recover(); err != nil {
		cancel()
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// update commits fn (sharing the commit with concurrent ones) and then
// takes back the disk space the commit's growth used, when it can.
func (s *Service) update(fn func(*bolt.Tx) error) error {
	err := s.tx.Update(fn)
	s.room.Keep()
	return err
}

// Close cancels pulls in progress, waits for them and releases the store.
// Mounted rootfs stay mounted.
func (s *Service) Close() error {
	s.cancel()
	s.wg.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close image metadata: %w", err)
	}
	return nil
}

// Get resolves ref: a tag, a digest reference, an image id (with or without
// "sha256:") or a unique id prefix of at least 12 hex digits. Unknown is
// errdefs.ErrNotFound; an unparsable reference or an id prefix matching
// several images is errdefs.ErrInvalidArgument.
func (s *Service) Get(ref string) (*Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	return rec.public(), nil
}

// List returns every image, ordered by id.
func (s *Service) List() []*Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Image, 0, len(s.images))
	for _, rec := range s.images {
		out = append(out, rec.public())
	}
	slices.SortFunc(out, func(a, b *Image) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// resolveLocked finds the image ref names; see Get.
func (s *Service) resolveLocked(ref string) (*imageRecord, error) {
	hex := strings.TrimPrefix(ref, "sha256:")
	if isHex(hex) && len(hex) >= 12 {
		if rec, ok := s.images["sha256:"+hex]; ok {
			return rec, nil
		}
		var found []*imageRecord
		for id, rec := range s.images {
			if strings.HasPrefix(id, "sha256:"+hex) {
				found = append(found, rec)
			}
		}
		switch {
		case len(found) == 1:
			return found[0], nil
		case len(found) > 1:
			return nil, fmt.Errorf("image id prefix %q matches %d images: %w", ref, len(found), errdefs.ErrInvalidArgument)
		case hex != ref || len(hex) == 64:
			return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
		}
		// A short hex string may also be a repository name: fall through.
	}
	r, err := parseReference(ref)
	if err != nil {
		return nil, err
	}
	id, ok := s.refs[r.String()]
	if !ok {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return s.images[id], nil
}

// Remove removes the image ref resolves to (every tag of it) and any layer no
// other image uses. Unknown is errdefs.ErrNotFound. Layers still used by a
// container rootfs stay until that rootfs is released. An image mounted as
// an image volume (PrepareVolume) is not removed: that is
// errdefs.ErrFailedPrecondition naming the containers.
func (s *Service) Remove(ctx context.Context, ref string) error {
	defer s.fs.changed() // FsInfo measures again
	s.mu.Lock()
	rec, err := s.resolveLocked(ref)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if users := s.volumeUsersLocked(rec.ID); len(users) > 0 {
		s.mu.Unlock()
		return fmt.Errorf("remove image %s: mounted as an image volume by container(s) %s: %w",
			rec.ID, strings.Join(users, ", "), errdefs.ErrFailedPrecondition)
	}
	if err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketImages).Delete([]byte(rec.ID))
	}); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("remove image %s: %w", rec.ID, err)
	}
	delete(s.images, rec.ID)
	for _, r := range slices.Concat(rec.RepoTags, rec.RepoDigests) {
		if s.refs[r] == rec.ID {
			delete(s.refs, r)
		}
	}
	trash, err := s.gcLocked()
	s.mu.Unlock()
	s.log.InfoContext(ctx, "image removed", "image_id", rec.ID, "ref", ref)
	s.emptyTrash(ctx, trash)
	if err != nil {
		return fmt.Errorf("remove image %s: %w", rec.ID, err)
	}
	return nil
}

func isHex(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
