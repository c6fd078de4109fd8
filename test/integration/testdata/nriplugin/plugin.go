package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/crin-dev/crin/test/poll"
)

// plugin holds the configuration and what the plugin saw.
type plugin struct {
	id      string // "NN-name"
	fileCfg *config
	stub    stub.Stub

	// wg counts unsolicited update goroutines.
	wg sync.WaitGroup

	// mu guards the fields below; the log is written under it so that
	// lines appear in seq order.
	mu   sync.Mutex
	cfg  *config
	log  *os.File
	seq  int
	used map[int]bool      // once rules that already fired, by index
	ids  map[string]string // container metadata name -> id, latest seen
}

// line is one event log line.
type line struct {
	Seq          int             `json:"seq"`
	Plugin       string          `json:"plugin"`
	Event        string          `json:"event"`
	Pod          string          `json:"pod"`
	PodID        string          `json:"pod_id"`
	Container    string          `json:"container"`
	ContainerID  string          `json:"container_id"`
	State        string          `json:"state"`
	Pid          int             `json:"pid"`
	ExitCode     int             `json:"exit_code"`
	Reason       string          `json:"reason"`
	Message      string          `json:"message"`
	PodObj       json.RawMessage `json:"pod_obj,omitempty"`
	ContainerObj json.RawMessage `json:"container_obj,omitempty"`
	Resources    json.RawMessage `json:"resources,omitempty"`
	// Adjust is the pending adjustment (ValidateContainerAdjustment only).
	Adjust json.RawMessage `json:"adjust,omitempty"`
	Failed []string        `json:"failed,omitempty"`
	Error  string          `json:"error,omitempty"`
	Time   time.Time       `json:"time"`
}

func protoRaw(m proto.Message) json.RawMessage {
	if m == nil {
		return nil
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return json.RawMessage(fmt.Sprintf("{%q:%q}", "marshal_error", err.Error()))
	}
	return b
}

// eventLine fills a line from an event's pod, container and resources.
func eventLine(event string, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) *line {
	l := &line{Event: event}
	if pod != nil {
		l.Pod, l.PodID, l.PodObj = pod.GetName(), pod.GetId(), protoRaw(pod)
	}
	if ctr != nil {
		l.Container, l.ContainerID, l.ContainerObj = ctr.GetName(), ctr.GetId(), protoRaw(ctr)
		l.State = ctr.GetState().String()
		l.Pid, l.ExitCode = int(ctr.GetPid()), int(ctr.GetExitCode())
		l.Reason, l.Message = ctr.GetStatusReason(), ctr.GetStatusMessage()
		if l.PodID == "" {
			l.PodID = ctr.GetPodSandboxId()
		}
	}
	if res != nil {
		l.Resources = protoRaw(res)
	}
	return l
}

// record appends l to the log, if there is one.
func (p *plugin) record(l *line) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recordLocked(l)
}

func (p *plugin) recordLocked(l *line) {
	p.seq++
	l.Seq, l.Plugin, l.Time = p.seq, p.id, time.Now()
	if p.log == nil {
		return
	}
	b, err := json.Marshal(l)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nriplugin %s: encode event: %v\n", p.id, err)
		return
	}
	if _, err := p.log.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "nriplugin %s: write event log: %v\n", p.id, err)
	}
}

// configure installs cfg and opens its log.
func (p *plugin) configure(cfg *config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cfg.Log != "" {
		f, err := os.OpenFile(cfg.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open log: %w", err)
		}
		if p.log != nil {
			_ = p.log.Close()
		}
		p.log = f
	}
	p.cfg = cfg
	clear(p.used)
	return nil
}

// see tracks the id of a container by its name.
func (p *plugin) see(event string, ctr *api.Container) {
	if ctr == nil || ctr.GetName() == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if event == "RemoveContainer" {
		if p.ids[ctr.GetName()] == ctr.GetId() {
			delete(p.ids, ctr.GetName())
		}
		return
	}
	p.ids[ctr.GetName()] = ctr.GetId()
}

// match returns the rules that apply to event, marking once rules used.
// podNames and ctrNames are the names involved (several for Synchronize);
// a rule's pod or container filter matches any of them.
func (p *plugin) match(event string, podNames, ctrNames []string) []*rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return nil
	}
	var out []*rule
	for i := range p.cfg.Rules {
		r := &p.cfg.Rules[i]
		if r.Event != event || (r.Pod != "" && !contains(podNames, r.Pod)) ||
			(r.Container != "" && !contains(ctrNames, r.Container)) {
			continue
		}
		if r.Once {
			if p.used[i] {
				continue
			}
			p.used[i] = true
		}
		out = append(out, r)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// answer is what the matching rules make of one event.
type answer struct {
	adjust  *api.ContainerAdjustment
	updates []*api.ContainerUpdate
}

// apply runs the rules matching an event: wait, sleep, unsolicited updates, fail
// or reject, then adjustments and updates.
func (p *plugin) apply(event string, podNames, ctrNames []string) (*answer, error) {
	a := &answer{}
	for _, r := range p.match(event, podNames, ctrNames) {
		if r.WaitFor != "" {
			poll.Within(10*time.Minute, func() (bool, string) {
				_, err := os.Stat(r.WaitFor)
				return err == nil, ""
			})
		}
		if r.sleep > 0 {
			time.Sleep(r.sleep)
		}
		if len(r.Unsolicited) > 0 {
			p.sendUnsolicited(r)
		}
		if r.Fail != "" {
			return nil, errors.New(r.Fail)
		}
		if r.Reject != "" {
			return nil, errors.New(r.Reject)
		}
		if r.adjust != nil {
			if a.adjust == nil {
				a.adjust = &api.ContainerAdjustment{}
			}
			proto.Merge(a.adjust, r.adjust)
		}
		if len(r.Update) > 0 {
			upds, missing := p.resolve(r.Update)
			a.updates = append(a.updates, upds...)
			if len(missing) > 0 {
				p.record(&line{Event: "Error", Container: strings.Join(missing, ","),
					Error: fmt.Sprintf("%s update: unknown container %s", event, strings.Join(missing, ", "))})
			}
		}
	}
	return a, nil
}

// resolve turns named updates into ContainerUpdates, returning the names it
// does not know.
func (p *plugin) resolve(us []update) ([]*api.ContainerUpdate, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var (
		out     []*api.ContainerUpdate
		missing []string
	)
	for _, u := range us {
		id, ok := p.ids[u.Container]
		if !ok {
			missing = append(missing, u.Container)
			continue
		}
		out = append(out, &api.ContainerUpdate{
			ContainerId:   id,
			Linux:         &api.LinuxContainerUpdate{Resources: proto.Clone(u.resources).(*api.LinuxResources)},
			IgnoreFailure: u.IgnoreFailure,
		})
	}
	return out, missing
}

// sendUnsolicited sends r's unsolicited updates after its delay, from a
// goroutine, and logs the result. Names are resolved when sending.
func (p *plugin) sendUnsolicited(r *rule) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if r.delay > 0 {
			time.Sleep(r.delay)
		}
		upds, missing := p.resolve(r.Unsolicited)
		names := make([]string, 0, len(r.Unsolicited))
		for _, u := range r.Unsolicited {
			names = append(names, u.Container)
		}
		res := &line{Event: "UpdateContainersResult", Container: strings.Join(names, ",")}
		var errs []string
		if len(missing) > 0 {
			errs = append(errs, "unknown container "+strings.Join(missing, ", "))
		}
		if len(upds) > 0 {
			failed, err := p.stub.UpdateContainers(upds)
			for _, f := range failed {
				res.Failed = append(res.Failed, f.GetContainerId())
			}
			if err != nil {
				errs = append(errs, err.Error())
			}
			ids := make([]string, 0, len(upds))
			for _, u := range upds {
				ids = append(ids, u.GetContainerId())
			}
			res.ContainerID = strings.Join(ids, ",")
		}
		res.Error = strings.Join(errs, "; ")
		p.record(res)
	}()
}
