package oci

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// maxID is the largest valid uid or gid: (uint32)-1 means "no id".
	maxID = 1<<32 - 2
	// maxDBSize bounds how much of an image's /etc/passwd or /etc/group
	// is read.
	maxDBSize = 4 << 20
	// maxSymlinks bounds symlink resolution inside a rootfs, as the
	// kernel's own limit does.
	maxSymlinks = 40
)

// userRequest is what the security context and the image ask for.
type userRequest struct {
	runAsUser     *int64
	runAsUsername string
	runAsGroup    *int64
	supplemental  []int64
	policy        runtimeapi.SupplementalGroupsPolicy
	imageUser     string
}

func containerUserRequest(sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) userRequest {
	r := userRequest{
		runAsUsername: sc.GetRunAsUsername(),
		supplemental:  sc.GetSupplementalGroups(),
		policy:        sc.GetSupplementalGroupsPolicy(),
		imageUser:     imageUser,
	}
	if v := sc.GetRunAsUser(); v != nil {
		r.runAsUser = &v.Value
	}
	if v := sc.GetRunAsGroup(); v != nil {
		r.runAsGroup = &v.Value
	}
	return r
}

// passwdEntry and groupEntry are the fields of /etc/passwd and /etc/group
// crin uses.
type passwdEntry struct {
	name     string
	uid, gid uint32
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// userDB reads an image's /etc/passwd and /etc/group lazily, through
// os.Root so nothing outside the rootfs is ever opened.
type userDB struct {
	root   *os.Root // nil: the rootfs has no user database
	passwd []passwdEntry
	groups []groupEntry
	loaded bool
}

func (db *userDB) load() error {
	if db.loaded || db.root == nil {
		return nil
	}
	db.loaded = true
	pw, err := readRootfsFile(db.root, "/etc/passwd")
	if err != nil {
		return err
	}
	db.passwd = parsePasswd(pw)
	gr, err := readRootfsFile(db.root, "/etc/group")
	if err != nil {
		return err
	}
	db.groups = parseGroup(gr)
	return nil
}

func (db *userDB) userByName(name string) (passwdEntry, bool, error) {
	if err := db.load(); err != nil {
		return passwdEntry{}, false, err
	}
	for _, e := range db.passwd {
		if e.name == name {
			return e, true, nil
		}
	}
	return passwdEntry{}, false, nil
}

func (db *userDB) userByID(uid uint32) (passwdEntry, bool, error) {
	if err := db.load(); err != nil {
		return passwdEntry{}, false, err
	}
	for _, e := range db.passwd {
		if e.uid == uid {
			return e, true, nil
		}
	}
	return passwdEntry{}, false, nil
}

func (db *userDB) groupByName(name string) (groupEntry, bool, error) {
	if err := db.load(); err != nil {
		return groupEntry{}, false, err
	}
	for _, g := range db.groups {
		if g.name == name {
			return g, true, nil
		}
	}
	return groupEntry{}, false, nil
}

// memberOf lists the gids of the groups that name user as a member.
func (db *userDB) memberOf(user string) ([]uint32, error) {
	if err := db.load(); err != nil {
		return nil, err
	}
	var gids []uint32
	for _, g := range db.groups {
		if slices.Contains(g.members, user) {
			gids = append(gids, g.gid)
		}
	}
	return gids, nil
}

// resolveUser turns a request into the process user. rootfs may be empty
// (no user database: only numeric ids work).
func resolveUser(rootfs string, req userRequest) (specs.User, error) {
	db := &userDB{}
	if rootfs != "" {
		r, err := os.OpenRoot(rootfs)
		if err != nil {
			return specs.User{}, fmt.Errorf("open rootfs %s: %w", rootfs, err)
		}
		defer r.Close()
		db.root = r
	}

	var (
		uid, gid uint32
		name     string // the user's name, for /etc/group membership
	)
	switch {
	case req.runAsUser != nil:
		v, err := checkID(*req.runAsUser, "linux.security_context.run_as_user")
		if err != nil {
			return specs.User{}, err
		}
		uid = v
		e, ok, err := db.userByID(uid)
		if err != nil {
			return specs.User{}, err
		}
		if ok {
			name, gid = e.name, e.gid
		}
	case req.runAsUsername != "":
		e, ok, err := db.userByName(req.runAsUsername)
		if err != nil {
			return specs.User{}, err
		}
		if !ok {
			return specs.User{}, invalidf("linux.security_context.run_as_username %q: no such user in the image", req.runAsUsername)
		}
		uid, gid, name = e.uid, e.gid, e.name
	default:
		if req.runAsGroup != nil {
			return specs.User{}, invalidf("linux.security_context.run_as_group %d: set without run_as_user or run_as_username", *req.runAsGroup)
		}
		var err error
		uid, gid, name, err = imageUser(db, req.imageUser)
		if err != nil {
			return specs.User{}, err
		}
	}
	if req.runAsGroup != nil {
		v, err := checkID(*req.runAsGroup, "linux.security_context.run_as_group")
		if err != nil {
			return specs.User{}, err
		}
		gid = v
	}

	groups := []uint32{gid}
	if req.policy != runtimeapi.SupplementalGroupsPolicy_Strict && name != "" {
		member, err := db.memberOf(name)
		if err != nil {
			return specs.User{}, err
		}
		groups = append(groups, member...)
	}
	for i, g := range req.supplemental {
		v, err := checkID(g, fmt.Sprintf("linux.security_context.supplemental_groups[%d]", i))
		if err != nil {
			return specs.User{}, err
		}
		groups = append(groups, v)
	}
	return specs.User{UID: uid, GID: gid, AdditionalGids: dedupe(groups)}, nil
}

// imageUser resolves an image config's User: "", "name", "uid",
// "name:group", "uid:gid" and the mixed forms.
func imageUser(db *userDB, s string) (uid, gid uint32, name string, err error) {
	if strings.ContainsAny(s, "\x00\n") {
		return 0, 0, "", invalidf("image user %q: not a valid user", s)
	}
	u, g, hasGroup := strings.Cut(s, ":")
	if hasGroup && g == "" {
		return 0, 0, "", invalidf("image user %q: empty group", s)
	}
	if u == "" && hasGroup {
		return 0, 0, "", invalidf("image user %q: empty user", s)
	}
	if u == "" {
		u = "0"
	}
	if n, perr := strconv.ParseInt(u, 10, 64); perr == nil {
		if uid, err = checkID(n, "image user"); err != nil {
			return 0, 0, "", err
		}
		e, ok, lerr := db.userByID(uid)
		if lerr != nil {
			return 0, 0, "", lerr
		}
		if ok {
			name, gid = e.name, e.gid
		}
	} else {
		e, ok, lerr := db.userByName(u)
		if lerr != nil {
			return 0, 0, "", lerr
		}
		if !ok {
			return 0, 0, "", invalidf("image user %q: no such user in the image", u)
		}
		uid, gid, name = e.uid, e.gid, e.name
	}
	if !hasGroup {
		return uid, gid, name, nil
	}
	if n, perr := strconv.ParseInt(g, 10, 64); perr == nil {
		if gid, err = checkID(n, "image user group"); err != nil {
			return 0, 0, "", err
		}
		return uid, gid, name, nil
	}
	ge, ok, lerr := db.groupByName(g)
	if lerr != nil {
		return 0, 0, "", lerr
	}
	if !ok {
		return 0, 0, "", invalidf("image user group %q: no such group in the image", g)
	}
	return uid, ge.gid, name, nil
}

func checkID(v int64, field string) (uint32, error) {
	if v < 0 || v > maxID {
		return 0, invalidf("%s %d: not a valid id", field, v)
	}
	return uint32(v), nil
}

func dedupe(ids []uint32) []uint32 {
	out := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// readRootfsFile reads name from the rootfs, resolving symlinks as if the
// rootfs were "/". A missing file reads as empty.
func readRootfsFile(r *os.Root, name string) ([]byte, error) {
	p, err := resolveInRoot(r, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s in rootfs: %w", name, err)
	}
	f, err := r.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s in rootfs: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s in rootfs: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, invalidf("image %s: not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDBSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s in rootfs: %w", name, err)
	}
	if len(b) > maxDBSize {
		return nil, invalidf("image %s: larger than %d bytes", name, maxDBSize)
	}
	return b, nil
}

// resolveInRoot resolves name inside r, following symlinks with "/"
// meaning the root of r and ".." stopping at it, so that every link in an
// image stays inside the image. It returns a path relative to r without
// symlinks; os.Root still refuses any escape if the tree changes between
// this and the open.
//
// internal/image's ResolveSubPath walks symlinks by the same rules (for an
// image volume's subpath): a change to the rules here belongs there too
// (see there why they are two).
func resolveInRoot(r *os.Root, name string) (string, error) {
	done := ""
	todo := name
	links := 0
	for {
		todo = strings.TrimLeft(todo, "/")
		if todo == "" {
			if done == "" {
				return ".", nil
			}
			return done, nil
		}
		comp, rest, _ := strings.Cut(todo, "/")
		todo = rest
		switch comp {
		case ".":
			continue
		case "..":
			if done = path.Dir(done); done == "." {
				done = ""
			}
			continue
		}
		next := path.Join(done, comp)
		fi, err := r.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", &fs.PathError{Op: "resolve", Path: name, Err: syscall.ELOOP}
		}
		target, err := r.Readlink(next)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			done = ""
		}
		todo = target + "/" + todo
	}
}

func parsePasswd(b []byte) []passwdEntry {
	var out []passwdEntry
	for _, f := range dbLines(b, 7) {
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if f[0] == "" || err1 != nil || err2 != nil || uid > maxID || gid > maxID {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid)})
	}
	return out
}

func parseGroup(b []byte) []groupEntry {
	var out []groupEntry
	for _, f := range dbLines(b, 4) {
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if f[0] == "" || err != nil || gid > maxID {
			continue
		}
		g := groupEntry{name: f[0], gid: uint32(gid)}
		for m := range strings.SplitSeq(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				g.members = append(g.members, m)
			}
		}
		out = append(out, g)
	}
	return out
}

// dbLines splits a colon-separated database into lines of at least n
// fields, skipping comments and malformed lines.
func dbLines(b []byte, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 0, 4096), maxDBSize)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < n {
			continue
		}
		out = append(out, f)
	}
	return out
}
