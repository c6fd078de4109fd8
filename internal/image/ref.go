package image

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
)

// dockerHub is the name Docker gives its registry in normalized
// references; ggcr calls it index.docker.io.
const dockerHub = "docker.io"

// pathComponent is one component of a repository path, as the distribution
// spec defines it.
var pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)

// reference is a parsed, normalized image reference.
type reference struct {
	host   string // registry host as users write it: "docker.io", "127.0.0.1:5000"
	path   string // repository path: "library/busybox"
	tag    string // set unless pulled by digest
	digest string // "sha256:...", set when pulled by digest
}

// parseReference normalizes s the way Docker does: "busybox" is
// docker.io/library/busybox:latest. Errors are errdefs.ErrInvalidArgument
// naming s.
func parseReference(s string) (reference, error) {
	if s == "" {
		return reference{}, fmt.Errorf("image reference is empty: %w", errdefs.ErrInvalidArgument)
	}
	if strings.TrimSpace(s) != s {
		return reference{}, fmt.Errorf("image reference %q: surrounding whitespace: %w", s, errdefs.ErrInvalidArgument)
	}
	r, err := name.ParseReference(s)
	if err != nil {
		return reference{}, fmt.Errorf("image reference %q: %v: %w", s, err, errdefs.ErrInvalidArgument)
	}
	ref := reference{
		host: r.Context().RegistryStr(),
		path: r.Context().RepositoryStr(),
	}
	for _, c := range strings.Split(ref.path, "/") {
		if !pathComponent.MatchString(c) {
			return reference{}, fmt.Errorf("image reference %q: repository path component %q is not valid: %w", s, c, errdefs.ErrInvalidArgument)
		}
	}
	if err := checkRegistryPort(ref.host); err != nil {
		return reference{}, fmt.Errorf("image reference %q: %w", s, err)
	}
	if ref.host == name.DefaultRegistry {
		ref.host = dockerHub
	}
	switch r := r.(type) {
	case name.Digest:
		ref.digest = r.DigestStr()
	case name.Tag:
		ref.tag = r.TagStr()
	}
	return ref, nil
}

// checkRegistryPort refuses a registry host whose port is not a TCP
// port: the parser takes any digits, and a pull would then fail as a dial
// error, Unavailable, which kubelet retries for ever.
func checkRegistryPort(host string) error {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.HasSuffix(host, "]") {
		return nil
	}
	port := host[i+1:]
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("registry port %q: must be 1 to 65535: %w", port, errdefs.ErrInvalidArgument)
	}
	return nil
}

// repo is the normalized repository name, "docker.io/library/busybox".
func (r reference) repo() string { return r.host + "/" + r.path }

// String is the normalized reference.
func (r reference) String() string {
	if r.digest != "" {
		return r.repo() + "@" + r.digest
	}
	return r.repo() + ":" + r.tag
}

// endpoint is one place a repository can be fetched from.
type endpoint struct {
	host   string // host[:port]
	prefix string // path prefix, no slashes around it
	plain  bool   // plain http
	mirror bool
}

// parseEndpoint validates a mirror URL.
func parseEndpoint(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("mirror %q: %v: %w", raw, err, errdefs.ErrInvalidArgument)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return endpoint{}, fmt.Errorf("mirror %q: scheme must be http or https: %w", raw, errdefs.ErrInvalidArgument)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("mirror %q: want scheme://host[:port][/prefix]: %w", raw, errdefs.ErrInvalidArgument)
	}
	p := strings.Trim(path.Clean("/"+u.Path), "/")
	return endpoint{host: u.Host, prefix: p, plain: u.Scheme == "http", mirror: true}, nil
}

// endpoints lists where ref is fetched from, in order: the mirrors of its
// host, then the host itself.
func (s *Service) endpoints(ref reference) []endpoint {
	var eps []endpoint
	eps = append(eps, s.mirrors[ref.host]...)
	if ref.host == dockerHub {
		eps = append(eps, s.mirrors[name.DefaultRegistry]...)
	}
	plain := slices.Contains(s.cfg.PlainHTTP, ref.host) ||
		(ref.host == dockerHub && slices.Contains(s.cfg.PlainHTTP, name.DefaultRegistry))
	return append(eps, endpoint{host: ref.host, plain: plain})
}

// remoteRef is ref as found at ep.
func (ep endpoint) remoteRef(ref reference) (name.Reference, error) {
	var opts []name.Option
	if ep.plain {
		opts = append(opts, name.Insecure)
	}
	repo := ep.host + "/" + ref.path
	if ep.prefix != "" {
		repo = ep.host + "/" + ep.prefix + "/" + ref.path
	}
	if ref.digest != "" {
		return name.NewDigest(repo+"@"+ref.digest, opts...)
	}
	return name.NewTag(repo+":"+ref.tag, opts...)
}

func (ep endpoint) String() string {
	scheme := "https"
	if ep.plain {
		scheme = "http"
	}
	if ep.prefix != "" {
		return scheme + "://" + ep.host + "/" + ep.prefix
	}
	return scheme + "://" + ep.host
}
