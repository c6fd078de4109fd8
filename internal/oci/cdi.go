package oci

import (
	"errors"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// InjectCDIDevices resolves the fully qualified CDI device names (the CRI
// config's CDI_devices; field names them in errors) in the CDI spec
// directories dirs and applies their edits to s: all of them or none.
// Errors: a malformed name is errdefs.ErrInvalidArgument; a device no spec
// defines (or no spec directory configured) is errdefs.ErrNotFound naming
// the device; edits the host cannot make (a device node missing) are
// errdefs.ErrFailedPrecondition.
func InjectCDIDevices(s *specs.Spec, field string, names, dirs []string) error {
	if len(names) == 0 {
		return nil
	}
	for i, n := range names {
		if _, _, _, err := parser.ParseQualifiedName(n); err != nil {
			return invalidf("%s[%d] %q: %v", field, i, n, err)
		}
	}
	if len(dirs) == 0 {
		return fmt.Errorf("%s[0] %q: no CDI spec directories are configured: %w", field, names[0], errdefs.ErrNotFound)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("CDI registry %s: %w", strings.Join(dirs, ", "), err)
	}
	// InjectDevices edits s only when every device resolves.
	unresolved, err := cache.InjectDevices(s, names...)
	if len(unresolved) > 0 {
		var specErrs []error
		for _, errs := range cache.GetErrors() {
			specErrs = append(specErrs, errs...)
		}
		why := fmt.Errorf("%s %q: no CDI spec in %s defines it: %w", field, unresolved[0], strings.Join(dirs, ", "), errdefs.ErrNotFound)
		if len(specErrs) > 0 {
			why = fmt.Errorf("%w (spec errors: %v)", why, errors.Join(specErrs...))
		}
		return why
	}
	if err != nil {
		return fmt.Errorf("%s %q: %v: %w", field, names, err, errdefs.ErrFailedPrecondition)
	}
	return nil
}
