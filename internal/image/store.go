package image

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketImages = []byte("images") // id -> imageRecord
	bucketLayers = []byte("layers") // diff id -> layerRecord
	bucketLeases = []byte("leases") // container id -> leaseRecord
	// bucketVolumes holds the image volumes of containers (volume.go).
	bucketVolumes = []byte("volumes") // "<container id>/<name>" -> volumeRecord
)

// imageRecord is an image as stored. The references of an image are its
// RepoTags and RepoDigests; Service.refs indexes them.
type imageRecord struct {
	Image
	// Blobs are the digests of the content store blobs the image holds:
	// index (if any), manifest, config and compressed layers.
	Blobs []string `json:"blobs"`
}

// public returns a copy callers may keep and change.
func (r *imageRecord) public() *Image { return r.clone() }

// clone deep-copies img.
func (img *Image) clone() *Image {
	c := *img
	c.RepoTags = slices.Clone(img.RepoTags)
	c.RepoDigests = slices.Clone(img.RepoDigests)
	c.Layers = slices.Clone(img.Layers)
	c.Config.Env = slices.Clone(img.Config.Env)
	c.Config.Entrypoint = slices.Clone(img.Config.Entrypoint)
	c.Config.Cmd = slices.Clone(img.Config.Cmd)
	c.Config.Volumes = slices.Clone(img.Config.Volumes)
	c.Config.Labels = maps.Clone(img.Config.Labels)
	return &c
}

// layerRecord is an unpacked layer.
type layerRecord struct {
	Dir string `json:"dir"` // name under Root/l
}

// leaseRecord is a container rootfs; it keeps its layers alive.
type leaseRecord struct {
	ImageID string   `json:"image_id"`
	Layers  []string `json:"layers"` // diff ids, bottom first
}

// load reads the metadata into memory.
func (s *Service) load() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketImages, bucketLayers, bucketLeases, bucketVolumes} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		if err := tx.Bucket(bucketImages).ForEach(func(k, v []byte) error {
			var rec imageRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode image %s: %w", k, err)
			}
			s.images[rec.ID] = &rec
			for _, r := range slices.Concat(rec.RepoTags, rec.RepoDigests) {
				s.refs[r] = rec.ID
			}
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketLayers).ForEach(func(k, v []byte) error {
			var rec layerRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode layer %s: %w", k, err)
			}
			s.layers[string(k)] = &rec
			s.dirs[rec.Dir] = string(k)
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketLeases).ForEach(func(k, v []byte) error {
			var rec leaseRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode rootfs lease %s: %w", k, err)
			}
			s.leases[string(k)] = &rec
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketVolumes).ForEach(func(k, v []byte) error {
			var rec volumeRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode image volume %s: %w", k, err)
			}
			s.volumes[string(k)] = &rec
			return nil
		})
	})
}

// put stores v as JSON under key in bucket.
func put(tx *bolt.Tx, bucket []byte, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", bucket, key, err)
	}
	return tx.Bucket(bucket).Put([]byte(key), data)
}

// recover removes what a crash or an interrupted pull left behind:
// temporary files, layer dirs no record names, and unreferenced layers and
// blobs.
func (s *Service) recover() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := removeContents(filepath.Join(s.root, "blobs", "tmp"), func(string) bool { return true }); err != nil {
		return err
	}
	if err := removeContents(filepath.Join(s.root, "l"), func(n string) bool { _, ok := s.dirs[n]; return !ok }); err != nil {
		return err
	}
	trash, err := s.gcLocked()
	s.emptyTrash(s.ctx, trash)
	return err
}

// removeContents removes the entries of dir that drop says to.
func removeContents(dir string, drop func(name string) bool) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range ents {
		if drop(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("clean %s: %w", dir, err)
			}
		}
	}
	return nil
}

// pin keeps keys (digests, diff ids) from garbage collection while a pull
// uses them; the returned func unpins.
func (s *Service) pin(keys []string) func() {
	s.mu.Lock()
	for _, k := range keys {
		s.pins[k]++
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		for _, k := range keys {
			if s.pins[k]--; s.pins[k] <= 0 {
				delete(s.pins, k)
			}
		}
		s.mu.Unlock()
	}
}

// gcLocked forgets the layers and removes the blobs that no image, rootfs,
// image volume or pull in progress uses. Layer dirs are renamed out of the way and
// returned, to be removed without holding mu (emptyTrash).
func (s *Service) gcLocked() ([]string, error) {
	usedLayers := map[string]bool{}
	usedBlobs := map[string]bool{}
	for _, img := range s.images {
		for _, l := range img.Layers {
			usedLayers[l] = true
		}
		for _, b := range img.Blobs {
			usedBlobs[b] = true
		}
	}
	for _, l := range s.leases {
		for _, d := range l.Layers {
			usedLayers[d] = true
		}
	}
	for _, v := range s.volumes {
		for _, d := range v.Layers {
			usedLayers[d] = true
		}
	}
	for k := range s.pins {
		usedLayers[k] = true
		usedBlobs[k] = true
	}
	var drop []string
	for diffID := range s.layers {
		if !usedLayers[diffID] {
			drop = append(drop, diffID)
		}
	}
	slices.Sort(drop)
	var trash []string
	if len(drop) > 0 {
		if err := s.update(func(tx *bolt.Tx) error {
			for _, d := range drop {
				if err := tx.Bucket(bucketLayers).Delete([]byte(d)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("forget unused layers: %w", err)
		}
		for _, d := range drop {
			dir := s.layers[d].Dir
			delete(s.layers, d)
			delete(s.dirs, dir)
			from := filepath.Join(s.root, "l", dir)
			to := filepath.Join(s.root, "l", ".del-"+dir)
			if err := os.Rename(from, to); err != nil {
				// New removes dirs no record names.
				s.log.Warn("move unused layer aside", "diff_id", d, "error", err)
				continue
			}
			trash = append(trash, to)
		}
	}
	blobDir := filepath.Join(s.root, "blobs", "sha256")
	ents, err := os.ReadDir(blobDir)
	if err != nil {
		return trash, fmt.Errorf("read %s: %w", blobDir, err)
	}
	for _, e := range ents {
		d := "sha256:" + e.Name()
		if usedBlobs[d] {
			continue
		}
		if err := os.Remove(filepath.Join(blobDir, e.Name())); err != nil && !os.IsNotExist(err) {
			return trash, fmt.Errorf("remove unused blob %s: %w", d, err)
		}
	}
	return trash, nil
}

// collect runs garbage collection, logging its errors: for callers that
// already have an error to return.
func (s *Service) collect(ctx context.Context) {
	s.mu.Lock()
	trash, err := s.gcLocked()
	s.mu.Unlock()
	s.emptyTrash(ctx, trash)
	if err != nil {
		s.log.WarnContext(ctx, "collect unused layers", "error", err)
	}
}

// emptyTrash removes layer dirs gcLocked moved aside.
func (s *Service) emptyTrash(ctx context.Context, trash []string) {
	defer s.fs.changed()
	for _, d := range trash {
		if err := os.RemoveAll(d); err != nil {
			s.log.WarnContext(ctx, "remove unused layer", "dir", d, "error", err)
			continue
		}
		s.log.DebugContext(ctx, "unused layer removed", "dir", strings.TrimPrefix(filepath.Base(d), ".del-"))
	}
}
