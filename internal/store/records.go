package store

import "encoding/json"

// SandboxState is the persisted state of a pod.
type SandboxState string

// Pod states; see docs/state-machines.md.
const (
	SandboxCreating SandboxState = "creating" // being set up; not visible to CRI
	SandboxReady    SandboxState = "ready"
	SandboxNotReady SandboxState = "notready" // stopped: infra down, network torn down
)

// Sandbox is the persisted record of a pod.
type Sandbox struct {
	ID    string       `json:"id"`
	Name  string       `json:"name"` // reservation key
	State SandboxState `json:"state"`
	// Config is the proto-encoded runtimeapi.PodSandboxConfig.
	Config         []byte `json:"config"`
	RuntimeHandler string `json:"runtime_handler"`
	NetNS          string `json:"netns,omitempty"` // pinned netns path; empty for host network
	// IPCNS, UTSNS and PIDNS are the pod's other namespaces, pinned as
	// files under the state dir (empty when the pod uses the host's, and
	// PIDNS when the pod does not share one PID namespace). Containers
	// join the pod by these paths, never by /proc/<infra pid>.
	IPCNS        string   `json:"ipcns,omitempty"`
	UTSNS        string   `json:"utsns,omitempty"`
	PIDNS        string   `json:"pidns,omitempty"`
	IPs          []string `json:"ips,omitempty"`
	CgroupParent string   `json:"cgroup_parent"`
	Pid          int      `json:"pid,omitempty"` // infra process; 0 without one
	// NoInfra is set for a pod without an infra process: crind made and
	// pinned its namespaces itself (docs/state-machines.md says which
	// pods). Records written before the field existed have an infra
	// process, and read as such.
	NoInfra         bool   `json:"no_infra,omitempty"`
	PodDir          string `json:"pod_dir"` // hostname, hosts, resolv.conf, shm
	NetworkTornDown bool   `json:"network_torn_down,omitempty"`
	CreatedAt       int64  `json:"created_at"` // unix nanos
	// NRILinux is the proto-encoded NRI LinuxPodSandbox derived from the
	// infra spec (namespaces, cgroups path, resources), so plugins see the
	// same pod after a restart.
	NRILinux []byte `json:"nri_linux,omitempty"`
	// NRIStopDelivered is set once NRI StopPodSandbox was delivered.
	NRIStopDelivered bool `json:"nri_stop_delivered,omitempty"`
}

// ContainerState is the persisted state of a container as the engine last
// recorded it; the runtime's view (through the shim) is authoritative for
// running/exited.
type ContainerState string

// Container states; see docs/state-machines.md.
const (
	ContainerCreating ContainerState = "creating"
	ContainerCreated  ContainerState = "created"
	ContainerRunning  ContainerState = "running"
	ContainerExited   ContainerState = "exited"
)

// Container is the persisted record of a container.
type Container struct {
	ID        string         `json:"id"`
	SandboxID string         `json:"sandbox_id"`
	Name      string         `json:"name"` // reservation key
	State     ContainerState `json:"state"`
	// Config is the proto-encoded runtimeapi.ContainerConfig.
	Config      []byte            `json:"config"`
	ImageRef    string            `json:"image_ref"` // the image as requested
	ImageID     string            `json:"image_id"`
	ImageName   string            `json:"image_name"` // resolved repo tag or digest
	LogPath     string            `json:"log_path,omitempty"`
	LogRoot     string            `json:"log_root,omitempty"` // the pod's log directory, which LogPath is in
	Rootfs      string            `json:"rootfs"`
	CgroupsPath string            `json:"cgroups_path"`
	Annotations map[string]string `json:"annotations,omitempty"` // final, after adjustments
	Pid         int               `json:"pid,omitempty"`
	ExitCode    int32             `json:"exit_code"`
	Reason      string            `json:"reason,omitempty"`
	Message     string            `json:"message,omitempty"`
	CreatedAt   int64             `json:"created_at"`
	StartedAt   int64             `json:"started_at,omitempty"`
	FinishedAt  int64             `json:"finished_at,omitempty"`
	// Resources is the JSON of the container's current OCI LinuxResources.
	Resources []byte `json:"resources,omitempty"`
	// ImageDigest is the image's repo digest ("sha256:..."), if it has one.
	ImageDigest string `json:"image_digest,omitempty"`
	// RestoreFrom is the dir a checkpoint archive the container is
	// restored from was unpacked into; empty for a container run afresh.
	RestoreFrom string `json:"restore_from,omitempty"`
	// Spec is the final OCI spec the container was created with (after NRI
	// adjustments); NRI plugins are shown the container from it. Set for
	// the PutContainer that stores it (in a bucket of its own, see
	// Store.ContainerSpec), else nil; records written before that carry
	// it here.
	Spec json.RawMessage `json:"spec,omitempty"`
	// NRIOwners tells which NRI plugin set which field of the container
	// (nri.OwnersTable's form); nil when no plugin adjusted it.
	NRIOwners map[string]string `json:"nri_owners,omitempty"`
	// NRIStopDelivered is set once NRI StopContainer was delivered for the
	// container's exit; it is delivered exactly once (docs/state-machines.md).
	NRIStopDelivered bool `json:"nri_stop_delivered,omitempty"`
	// Evicting is set, with EvictMessage (the plugin's reason), before the
	// container is signalled for an NRI plugin's eviction, and cleared when
	// its exit is recorded (with reason Evicted and that message). A
	// restart that finds it set on a live container kills the container
	// (docs/recovery.md).
	Evicting     bool   `json:"evicting,omitempty"`
	EvictMessage string `json:"evict_message,omitempty"`
	// StopSignal is the signal StopContainer sends first, as a number:
	// the CRI config's stop_signal, else the image's, else SIGTERM,
	// resolved at creation so a later image change or removal does not
	// change it. Empty in records made before it was recorded.
	StopSignal string `json:"stop_signal,omitempty"`
	// ImageVolumes maps the index of each config mount that names an image
	// (an image volume) to the image it mounts, as ContainerStatus
	// reports it in that mount's image.image_ref: the image's repo digest
	// reference, else its id.
	ImageVolumes map[int]string `json:"image_volumes,omitempty"`
}
