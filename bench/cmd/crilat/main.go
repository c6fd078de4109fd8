// Command crilat measures a CRI runtime the way kubelet drives it: over its
// unix socket with the k8s.io/cri-api gRPC client. It is the Go half of
// bench/lifecycle.sh and bench/stats.sh and has five subcommands:
//
//	crilat registry -pause FILE -addr-file FILE
//	    serve a registry on 127.0.0.1 with busybox and a pause image built
//	    from FILE (crin-pause) pushed; write its host:port to -addr-file and
//	    serve until SIGTERM.
//	crilat run -target name=NAME,socket=SOCK,pid=PID,shim=COMM[,pause=REF][,metrics=URL] ...
//	        -image REF -log-dir DIR [-n 50] [-k 10] [-out-dir DIR] [-baseline NAME]
//	        [-par 30] [-par-rounds 3] [-floor-dir DIR -floor-ns DIR -floor-cgroup CG]
//	    time N full pod lifecycles on each target (interleaved, with one run
//	    of the OCI runtime floor, runc create + start on a busybox bundle,
//	    after each round when -floor-dir is set), then start PAR pods at
//	    once on each target, PAR-ROUNDS times, then measure each daemon's
//	    and its shims' memory with K pods running (none with -k 0); print
//	    the figures side by side, crind's phase trace (scraped from the
//	    target's metrics URL before and after the timed lifecycles) and
//	    issue 12's targets, and write them as NAME.json (and floor.json).
//	    With -baseline, also print the latency each target adds to the
//	    target NAME (bench/nri.sh: crind with 1 or 4 NRI plugins against 0).
//	crilat stats -target ... -image REF -log-dir DIR [-pods 10] [-containers 10]
//	        [-calls 200] [-out-dir DIR]
//	    start PODS pods of CONTAINERS running busybox containers on each
//	    target (each writes a few files into its rootfs), wait until every
//	    writable layer is reported, then time ListContainerStats,
//	    ListPodSandboxStats, ImageFsInfo and ContainerStats, CALLS each,
//	    interleaved between the targets; print mean/p50/p99 per RPC and
//	    the daemons' memory side by side.
//	crilat compare [-baseline NAME] A.json [B.json ...]
//	    print the results of several runs side by side.
//	crilat cleanup -socket SOCK
//	    stop and remove every container and pod the runtime knows.
//
// No figure is checked against a threshold: crilat reports, it never judges.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "registry":
		err = registryCmd(os.Args[2:])
	case "run":
		err = runCmd(os.Args[2:])
	case "stats":
		err = statsCmd(os.Args[2:])
	case "compare":
		err = compareCmd(os.Args[2:])
	case "cleanup":
		err = cleanupCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "crilat %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: crilat registry|run|stats|compare|cleanup [flags] (see the package doc)")
	os.Exit(2)
}
