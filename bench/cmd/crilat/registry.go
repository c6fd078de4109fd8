package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// Repository names the bench pushes; lifecycle.sh builds references from them.
const (
	busyboxRepo = "library/busybox:bench"
	pauseRepo   = "library/pause:bench"
)

// registryCmd serves the bench registry until SIGTERM or SIGINT.
func registryCmd(args []string) error {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "loopback address to listen on")
	pausePath := fs.String("pause", "bin/crin-pause", "static pause binary packed as /pause in the pause image")
	addrFile := fs.String("addr-file", "", "file to write host:port to once both images are pushed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	busybox, err := imagetest.BuildBusybox()
	if err != nil {
		return fmt.Errorf("build busybox: %w", err)
	}
	pause, err := pauseImage(*pausePath)
	if err != nil {
		return err
	}
	srv, host, err := imagetest.Serve(*addr, imagetest.RegistryOptions{})
	if err != nil {
		return err
	}
	defer srv.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, p := range []struct {
		repo string
		img  v1.Image
	}{{busyboxRepo, busybox}, {pauseRepo, pause}} {
		if _, err := imagetest.PushImage(pctx, host, p.repo, p.img); err != nil {
			return err
		}
	}
	if *addrFile != "" {
		// Written to a temporary name and renamed so the script never reads half a line.
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(host+"\n"), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			return fmt.Errorf("rename %s: %w", tmp, err)
		}
	}
	fmt.Printf("registry %s: %s/%s %s/%s\n", host, host, busyboxRepo, host, pauseRepo)
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown registry: %w", err)
	}
	return nil
}

// pauseImage packs the static binary at path as a single-layer image whose
// entrypoint is /pause, the shape containerd's sandbox_image expects.
func pauseImage(path string) (v1.Image, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read pause binary: %w", err)
	}
	raw, err := imagetest.TarBytes(imagetest.File("pause", string(bin), 0o755))
	if err != nil {
		return nil, fmt.Errorf("pack pause binary: %w", err)
	}
	layer, err := imagetest.LayerFromTar(raw)
	if err != nil {
		return nil, fmt.Errorf("pause layer: %w", err)
	}
	img, err := imagetest.NewImage(v1.Config{Entrypoint: []string{"/pause"}}, layer)
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	return img, nil
}
