package nri

import (
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
)

// mergeLive applies a keyed-list change to the adjusted container; its
// funcs are nil when there is no container to change.
type mergeLive[T any] struct {
	set func(key string, v T)
	del func(key string)
}

// mergeLiveSlice changes the list *p whose items are keyed by keyOf.
func mergeLiveSlice[T any](p *[]T, keyOf func(T) string) mergeLive[T] {
	return mergeLive[T]{
		set: func(key string, v T) {
			if i := slices.IndexFunc(*p, func(x T) bool { return keyOf(x) == key }); i >= 0 {
				(*p)[i] = v
				return
			}
			*p = append(*p, v)
		},
		del: func(key string) {
			*p = slices.DeleteFunc(*p, func(x T) bool { return keyOf(x) == key })
		},
	}
}

// mergeLiveEnv changes an OCI "NAME=value" environment.
func mergeLiveEnv(p *[]string) mergeLive[*api.KeyValue] {
	return mergeLive[*api.KeyValue]{
		set: func(key string, v *api.KeyValue) {
			kv := key + "=" + v.GetValue()
			if i := slices.IndexFunc(*p, func(x string) bool { return mergeEnvName(x) == key }); i >= 0 {
				(*p)[i] = kv
				return
			}
			*p = append(*p, kv)
		},
		del: func(key string) {
			*p = slices.DeleteFunc(*p, func(x string) bool { return mergeEnvName(x) == key })
		},
	}
}

// mergeList merges a keyed list (mounts by destination, env by name, ...)
// in the order the plugin gave it. out gets the set items and, for items
// of the original container, the removal marks (built by mark from the
// marked key) ahead of any later set of the same key.
func mergeList[T any](c *mergeCall, f api.Field, in []T, keyOf func(T) string, mark func(string) T, out *[]T, live mergeLive[T]) error {
	for _, x := range in {
		key, remove := api.IsMarkedForRemoval(keyOf(x))
		if err := c.claimKey(f, key, remove); err != nil {
			return err
		}
		same := func(y T) bool { return keyOf(y) == key }
		if remove {
			if live.del != nil {
				live.del(key)
			}
			*out = slices.DeleteFunc(*out, same)
			marked := api.MarkForRemoval(key)
			if c.origHas(f, key) && !slices.ContainsFunc(*out, func(y T) bool { return keyOf(y) == marked }) {
				*out = append(*out, mark(marked))
			}
			continue
		}
		if live.set != nil {
			live.set(key, x)
		}
		if i := slices.IndexFunc(*out, same); i >= 0 {
			(*out)[i] = x
		} else {
			*out = append(*out, x)
		}
	}
	return nil
}

// mergeMap merges a map field (annotations, sysctls, ...). The plugin's
// removals are applied before its sets, so removing and setting one key is
// a set. live may be nil.
func mergeMap[V any](c *mergeCall, f api.Field, in map[string]V, out, live *map[string]V) error {
	if len(in) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(in))
	for _, removals := range []bool{true, false} {
		for _, raw := range keys {
			key, remove := api.IsMarkedForRemoval(raw)
			if remove != removals {
				continue
			}
			if err := c.claimKey(f, key, remove); err != nil {
				return err
			}
			if *out == nil {
				*out = map[string]V{}
			}
			if remove {
				if live != nil {
					delete(*live, key)
				}
				delete(*out, key)
				if c.origHas(f, key) {
					var zero V
					(*out)[raw] = zero
				}
				continue
			}
			if live != nil {
				if *live == nil {
					*live = map[string]V{}
				}
				(*live)[key] = in[raw]
			}
			delete(*out, api.MarkForRemoval(key))
			(*out)[key] = in[raw]
		}
	}
	return nil
}

// claimKey claims the item key of field f for the plugin, for a set or,
// if remove, a removal; an item without a key is invalid.
func (c *mergeCall) claimKey(f api.Field, key string, remove bool) error {
	if key == "" {
		return c.invalid(f)
	}
	if remove {
		return c.claimRemoval(f, key)
	}
	return c.claim(f, key)
}

// invalid reports an item of field f without a key.
func (c *mergeCall) invalid(f api.Field) error {
	return fmt.Errorf("merge response of plugin %q: %s without a key: %w", c.plugin, mergeFieldName(f), errdefs.ErrInvalidArgument)
}
