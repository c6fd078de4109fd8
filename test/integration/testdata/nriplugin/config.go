package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
)

// config is the plugin's JSON configuration.
type config struct {
	// Log is the file every event is appended to, one JSON line each.
	Log string `json:"log"`
	// Events is the subscription in api.ParseEventMask syntax; empty means
	// every event but ValidateContainerAdjustment.
	Events string `json:"events,omitempty"`
	Rules  []rule `json:"rules,omitempty"`

	mask api.EventMask
}

// rule says how to answer matching events. Every matching rule applies, in
// order: sleeps add up, the first fail (or reject) is returned, adjustments
// are merged (proto.Merge) and updates concatenated. For
// ValidateContainerAdjustment, fail and reject both reject: the stub turns
// a validator's error into a rejection with the error as reason.
type rule struct {
	// Event is an api.Event pretty name ("CreateContainer"). Beyond the
	// events of the NRI API, "Configure" and "Synchronize" may be named
	// (sleep, fail and unsolicited only).
	Event     string `json:"event"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
	Once      bool   `json:"once,omitempty"`
	Sleep     string `json:"sleep,omitempty"`
	// WaitFor is a path: the hook waits until it exists (at most 10
	// minutes), so a test decides when a hook in progress ends.
	WaitFor string `json:"wait_for,omitempty"`
	Fail    string `json:"fail,omitempty"`
	Reject  string `json:"reject,omitempty"`
	// Adjust is an api.ContainerAdjustment in protojson (CreateContainer).
	Adjust           json.RawMessage `json:"adjust,omitempty"`
	Update           []update        `json:"update,omitempty"`
	Unsolicited      []update        `json:"unsolicited,omitempty"`
	UnsolicitedDelay string          `json:"unsolicited_delay,omitempty"`

	sleep  time.Duration
	delay  time.Duration
	adjust *api.ContainerAdjustment
}

// update asks for new resources for a container named by its metadata name.
type update struct {
	Container     string          `json:"container"`
	Resources     json.RawMessage `json:"resources,omitempty"`
	IgnoreFailure bool            `json:"ignore_failure,omitempty"`

	resources *api.LinuxResources
}

// knownEvents are the names a rule may match.
var knownEvents = func() map[string]bool {
	m := map[string]bool{"Configure": true, "Synchronize": true}
	for _, name := range api.EventPrettyNames {
		m[name] = true
	}
	return m
}()

// parseConfig decodes and checks a configuration; every error names the
// rule and the field.
func parseConfig(b []byte) (*config, error) {
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if c.Events == "" {
		c.mask = api.ValidEvents
		c.mask.Clear(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	} else {
		m, err := api.ParseEventMask(c.Events)
		if err != nil {
			return nil, fmt.Errorf("config events %q: %w", c.Events, err)
		}
		c.mask = m
	}
	for i := range c.Rules {
		if err := c.Rules[i].parse(); err != nil {
			return nil, fmt.Errorf("config rules[%d] (%s): %w", i, c.Rules[i].Event, err)
		}
	}
	return &c, nil
}

var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: false}

func (r *rule) parse() error {
	if !knownEvents[r.Event] {
		return fmt.Errorf("unknown event %q", r.Event)
	}
	var err error
	if r.Sleep != "" {
		if r.sleep, err = time.ParseDuration(r.Sleep); err != nil {
			return fmt.Errorf("sleep %q: %w", r.Sleep, err)
		}
	}
	if r.UnsolicitedDelay != "" {
		if r.delay, err = time.ParseDuration(r.UnsolicitedDelay); err != nil {
			return fmt.Errorf("unsolicited_delay %q: %w", r.UnsolicitedDelay, err)
		}
	}
	if r.Reject != "" && r.Event != "ValidateContainerAdjustment" {
		return fmt.Errorf("reject %q: only for ValidateContainerAdjustment", r.Reject)
	}
	if len(r.Adjust) > 0 {
		if r.Event != "CreateContainer" {
			return fmt.Errorf("adjust: only for CreateContainer")
		}
		r.adjust = &api.ContainerAdjustment{}
		if err := unmarshal.Unmarshal(r.Adjust, r.adjust); err != nil {
			return fmt.Errorf("adjust: %w", err)
		}
	}
	if len(r.Update) > 0 {
		switch r.Event {
		case "CreateContainer", "UpdateContainer", "StopContainer":
		default:
			return fmt.Errorf("update: only for CreateContainer, UpdateContainer and StopContainer")
		}
	}
	for i := range r.Update {
		if err := r.Update[i].parse(); err != nil {
			return fmt.Errorf("update[%d]: %w", i, err)
		}
	}
	for i := range r.Unsolicited {
		if err := r.Unsolicited[i].parse(); err != nil {
			return fmt.Errorf("unsolicited[%d]: %w", i, err)
		}
	}
	return nil
}

func (u *update) parse() error {
	if u.Container == "" {
		return fmt.Errorf("container: empty")
	}
	u.resources = &api.LinuxResources{}
	if len(u.Resources) > 0 {
		if err := unmarshal.Unmarshal(u.Resources, u.resources); err != nil {
			return fmt.Errorf("resources of %q: %w", u.Container, err)
		}
	}
	return nil
}
