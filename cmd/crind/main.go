// Command crind is crin's daemon: a Kubernetes CRI runtime serving the CRI
// v1 RuntimeService and ImageService on a unix socket.
//
//	crind [--config FILE]        run the daemon
//	crind config default         print the full default configuration
//	crind cni install-default    install the default CNI network if none
//	crind --version              print the version
//
// Before serving CRI, crind starts the NRI plugins; besides CRI it serves
// its admin API (read by crinctl) on cri.admin_socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	// Initialised early: turns heap profiling off unless asked for.
	_ "github.com/crin-dev/crin/cmd/crind/internal/memprofile"
	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/config"
	"github.com/crin-dev/crin/internal/cri"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/nri"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/serving"
	"github.com/crin-dev/crin/internal/store"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "crind:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("crind", flag.ContinueOnError)
	cfgPath := fs.String("config", config.DefaultPath, "configuration file (TOML); absent default is fine")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Printf("crind %s\n", version)
		return nil
	}
	missing := config.MissingError
	if *cfgPath == config.DefaultPath {
		missing = config.MissingOK
	}
	if rest := fs.Args(); len(rest) > 0 {
		if len(rest) == 2 && rest[0] == "cni" && rest[1] == "install-default" {
			cfg, err := config.Load(*cfgPath, missing)
			if err != nil {
				return err
			}
			wrote, err := cni.InstallDefault(cfg.CNI.ConfDir)
			if err != nil {
				return err
			}
			if wrote {
				fmt.Printf("installed crin's default bridge network in %s\n", cfg.CNI.ConfDir)
			}
			return nil
		}
		if len(rest) == 2 && rest[0] == "config" && rest[1] == "default" {
			b, err := config.Default().Encode()
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(b)
			return err
		}
		return fmt.Errorf("unknown command %q (commands: config default, cni install-default)", strings.Join(rest, " "))
	}
	cfg, err := config.Load(*cfgPath, missing)
	if err != nil {
		return err
	}
	level, _ := config.ParseLevel(cfg.LogLevel)
	// Records logged with a CRI request's context carry its request id.
	log := slog.New(serving.NewContextHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tuneGoRuntime(ctx, cfg, log)
	// Taken before any child starts (NRI plugins, shims): see notify.go.
	notifier := takeNotifySocket()
	return serve(ctx, cfg, log, notifier)
}

// serve runs crind until ctx ends or a server fails: it opens the store,
// the image service, the network and the runtimes, recovers the CRI
// service's state, starts NRI, then serves CRI, streams, admin and
// metrics. Whatever it opened is closed in reverse order on the way out.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, notifier systemdNotifier) error {
	// Block I/O class devices are resolved now, so a typo in a device
	// path stops crind instead of failing containers later.
	blockio, err := cfg.CRI.BlockioResolver()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	layout, err := cgroupLayout(ctx, cfg, log)
	if err != nil {
		return err
	}
	if err := makePrivateDirs(cfg.Root, cfg.State); err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(cfg.Root, "crin.db"), store.WithLogger(log))
	if err != nil {
		return err
	}
	defer st.Close()
	images, err := openImages(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer images.Close()
	network, err := cni.New(cni.Config{
		ConfDir:  cfg.CNI.ConfDir,
		BinDirs:  cfg.CNI.BinDirs,
		CacheDir: filepath.Join(cfg.Root, "cni"),
		Logger:   log,
	})
	if err != nil {
		return err
	}
	shim, pause, err := findShimAndPause(cfg)
	if err != nil {
		return err
	}
	units := cgroup.NewUnits() // dials systemd at its first use
	defer units.Close()
	runtimes, closeRuntimes, err := buildRuntimes(ctx, cfg, layout.Driver, units, shim, log)
	if err != nil {
		return err
	}
	defer closeRuntimes()
	// Under the root dir, not the state dir: /run is often mounted
	// noexec, and gVisor's gofer, remounting a read-only rootfs in its
	// user namespace, cannot keep that locked flag (it fails with EPERM
	// and the sandbox never starts; docs/runtimes.md, "gVisor").
	pauseRoot := filepath.Join(cfg.Root, "pause-rootfs")
	if err := oci.PreparePauseRoot(pauseRoot); err != nil {
		return err
	}

	// The streaming listener is bound first so the URLs the service hands
	// out name its real port (cri.stream_address may ask for port 0).
	streamLis, err := listenStreams(cfg.CRI.StreamAddress)
	if err != nil {
		return err
	}
	if streamLis != nil {
		defer streamLis.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := serving.NewMetrics(reg)
	opts := serviceOptions(cfg, log)
	setCgroupOptions(&opts, layout, units)
	opts.Store, opts.Images, opts.Network, opts.Runtimes = st, images, network, runtimes
	opts.PauseRoot, opts.PauseBinary, opts.BlockioClass, opts.Metrics = pauseRoot, pause, blockio, metrics
	if streamLis != nil {
		opts.StreamAddress = streamLis.Addr().String()
	}
	svc, err := cri.New(ctx, opts)
	if err != nil {
		return err
	}
	defer svc.Close()

	// NRI starts before CRI is served, so kubelet's first request already
	// goes through the plugins. Deferred after svc.Close, the adaptation
	// stops first: after CRI stops serving, before the service closes.
	var plugins pluginLister
	if cfg.NRI.Enable {
		ad, err := startNRI(ctx, cfg, svc, reg, log)
		if ad != nil {
			defer stopNRI(ctx, ad, log)
		}
		if err != nil {
			return err
		}
		plugins = ad
	}
	return runServers(ctx, cfg, log, servers{svc: svc, metrics: metrics, reg: reg, plugins: plugins, streamLis: streamLis, runtimes: len(runtimes), notifier: notifier})
}

// findShimAndPause finds the crin-shim and crin-pause binaries.
func findShimAndPause(cfg *config.Config) (shim, pause string, err error) {
	if shim, err = config.FindBinary(cfg.CRI.ShimBinary, "crin-shim"); err != nil {
		return "", "", err
	}
	if pause, err = config.FindBinary(cfg.CRI.PauseBinary, "crin-pause"); err != nil {
		return "", "", err
	}
	return shim, pause, nil
}

// makePrivateDirs creates dirs (mode 0700) and makes an existing one 0700.
func makePrivateDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// openImages opens the image store with the registry and pull settings.
func openImages(ctx context.Context, cfg *config.Config, log *slog.Logger) (*image.Service, error) {
	mirrors := map[string][]image.Endpoint{}
	for host, m := range cfg.Registry.Mirrors {
		for _, e := range m.Endpoints {
			mirrors[host] = append(mirrors[host], image.Endpoint{URL: e})
		}
	}
	return image.New(ctx, image.Config{
		Root:                   filepath.Join(cfg.Root, "image"),
		Mirrors:                mirrors,
		PlainHTTP:              cfg.Registry.PlainHTTP,
		PullTimeout:            time.Duration(cfg.Image.PullTimeout),
		MaxConcurrentDownloads: cfg.Image.MaxConcurrentDownloads,
		PullProgressTimeout:    time.Duration(cfg.Image.PullProgressTimeout),
		MaxManifestBytes:       cfg.Image.MaxManifestBytes,
		MaxConfigBytes:         cfg.Image.MaxConfigBytes,
		MaxUnpackedBytes:       cfg.Image.MaxUnpackedBytes,
		Logger:                 log,
	})
}

// listenStreams binds the streaming server's address; none when empty.
func listenStreams(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	return lis, nil
}

// cgroupLayout is the cgroup driver and parent crind runs with
// (config.CgroupLayout), logged.
func cgroupLayout(ctx context.Context, cfg *config.Config, log *slog.Logger) (cgroup.Layout, error) {
	layout, err := cfg.CgroupLayout()
	if err != nil {
		return layout, fmt.Errorf("config: %w", err)
	}
	log.InfoContext(ctx, "cgroup driver", "driver", layout.Driver, "cgroup_parent", layout.Parent)
	return layout, nil
}

// setCgroupOptions sets the service's cgroup options from layout: with
// the systemd driver, units to stop pod slices with.
func setCgroupOptions(opts *cri.Options, layout cgroup.Layout, units *cgroup.Units) {
	opts.CgroupDriver, opts.CgroupParent = layout.Driver, layout.Parent
	if layout.Driver == cgroup.Systemd {
		opts.Units = units
	}
}

// serviceOptions maps the config onto the CRI service's options; serve
// adds the components it opened.
func serviceOptions(cfg *config.Config, log *slog.Logger) cri.Options {
	return cri.Options{
		DefaultRuntime:     cfg.DefaultRuntime,
		RootDir:            cfg.Root,
		NetNSDir:           filepath.Join(cfg.State, "netns"),
		UserNSDir:          filepath.Clean(cfg.State) + "-userns",
		SeccompProfileRoot: cfg.CRI.SeccompProfileRoot,
		RestoreArchives:    cfg.CRI.RestoreFromArchives,
		OOMScoreAdjMin:     ownOOMScoreAdj(),
		Version:            version,
		Logger:             log,
		CDISpecDirs:        cfg.CRI.CDISpecDirs,
		RdtClass:           cfg.CRI.RdtResolver(),
		StatsPeriod:        time.Duration(cfg.CRI.StatsPeriod),
		ReleaseMemoryAfter: time.Duration(cfg.GoRuntime.ReleaseAfter),
	}
}

// servers is what runServers serves.
type servers struct {
	svc       *cri.Service
	metrics   *serving.Metrics
	reg       *prometheus.Registry
	plugins   pluginLister
	streamLis net.Listener // nil: no streaming server
	runtimes  int
	notifier  systemdNotifier
}

// runServers serves CRI, the admin socket, streams and metrics until ctx
// ends or one of them fails, then shuts them all down within a deadline.
func runServers(ctx context.Context, cfg *config.Config, log *slog.Logger, sv servers) error {
	srv := serving.NewServer(log, sv.metrics, sv.svc)

	adminLis, err := listenAdmin(cfg.AdminSocketPath())
	if err != nil {
		return err
	}
	admin := newAdminServer(sv.plugins, sv.svc, log, sv.metrics)
	lis, err := listenUnix(cfg.CRI.Socket)
	if err != nil {
		adminLis.Close()
		return err
	}
	// Both sockets are bound, so clients that connect from now on are
	// answered: a unit of Type=notify is started, and units ordered after
	// it may dial the CRI socket.
	if err := sv.notifier.notify("READY=1"); err != nil {
		log.WarnContext(ctx, "service manager not told crind is ready", "error", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := admin.Serve(adminLis); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		log.InfoContext(ctx, "crind serving CRI", "socket", cfg.CRI.Socket, "admin_socket", cfg.AdminSocketPath(), "version", version, "runtimes", sv.runtimes)
		return srv.Serve(lis)
	})
	if sv.streamLis != nil {
		g.Go(func() error {
			log.InfoContext(ctx, "crind serving streams", "address", sv.streamLis.Addr().String())
			return sv.svc.ServeStreams(gctx, sv.streamLis)
		})
	}
	var hs *http.Server
	if cfg.CRI.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", serving.RecoverHTTP(log, sv.metrics, "metrics", promhttp.HandlerFor(sv.reg, promhttp.HandlerOpts{})))
		hs = &http.Server{Addr: cfg.CRI.MetricsAddress, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := hs.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics server: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		if err := sv.notifier.notify("STOPPING=1"); err != nil {
			log.WarnContext(ctx, "service manager not told crind is stopping", "error", err)
		}
		shutdownServers(ctx, log, srv, hs, admin)
		return nil
	})
	err = g.Wait()
	if ctx.Err() != nil && (err == nil || errors.Is(err, grpc.ErrServerStopped)) {
		return nil
	}
	return err
}

// shutdownServers stops CRI gracefully (forcibly after 10s), then the
// metrics and admin servers within 5s.
func shutdownServers(ctx context.Context, log *slog.Logger, srv *grpc.Server, hs *http.Server, admin *http.Server) {
	log.InfoContext(ctx, "crind shutting down")
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if hs != nil {
		_ = hs.Shutdown(sctx)
	}
	_ = admin.Shutdown(sctx)
}

// startNRI creates and starts the NRI adaptation and attaches it to the CRI
// service. A plugin that fails to start is logged by the adaptation and
// does not fail this; a bad configuration or an unusable plugin directory
// or socket does. The returned adaptation, when not nil, must be stopped
// even if err is set.
func startNRI(ctx context.Context, cfg *config.Config, svc *cri.Service, reg prometheus.Registerer, log *slog.Logger) (*nri.Adaptation, error) {
	metrics, err := nri.NewPrometheusMetrics(reg)
	if err != nil {
		return nil, err
	}
	ad, err := nri.New(nriConfig(cfg.NRI, version), svc.NRIEngine(),
		nri.WithLogger(log.With("component", "nri")),
		nri.WithMetrics(metrics),
	)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	if err := ad.Start(ctx); err != nil {
		return ad, fmt.Errorf("start nri: %w", err)
	}
	svc.AttachNRI(ctx, ad)
	log.InfoContext(ctx, "nri started", "plugins", len(ad.Plugins()), "socket", nriSocket(cfg), "plugin_path", cfg.NRI.PluginPath)
	return ad, nil
}

// stopNRI shuts the plugins down; it has its own deadline, since the
// daemon's context is already cancelled by then.
func stopNRI(ctx context.Context, ad *nri.Adaptation, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := ad.Stop(sctx); err != nil {
		log.WarnContext(sctx, "nri stop", "error", err)
	}
}

// nriSocket is the external plugin socket, or "" when connections are off.
func nriSocket(cfg *config.Config) string {
	if cfg.NRI.DisableConnections {
		return ""
	}
	return cfg.NRI.SocketPath
}

// listenUnix listens on a fresh unix socket with mode 0660.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

// ownOOMScoreAdj is crind's own oom_score_adj: containers cannot go lower
// without CAP_SYS_RESOURCE.
func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return v
}
