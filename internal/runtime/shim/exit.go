package shim

// Names of the files a shim keeps in its container's state directory.
const (
	ShimPidFile = "shim.pid" // the pid of the shim (in its dir) or of the container's shim
	// ShimDirFile, in a container's state dir, holds the path of the dir
	// of the shim that supervises it (its pod's). crind writes it before
	// the bundle's config.json, so every container crind knows has one.
	ShimDirFile = "shim.dir"
	InitPidFile = "init.pid" // the container init's pid, from the runtime
	ShimLogFile = "shim.log" // the shim's own log
	RuntimeLog  = "runtime.log"
	SocketFile  = "shim.sock"
	// ConsoleSocketFile is where a terminal container's shim receives
	// the terminal from the runtime; it exists only during create.
	ConsoleSocketFile = "console.sock"
	ConfigFile        = "config.json"
	socketMaxLen      = 107 // sun_path holds 108 bytes including the NUL
)
