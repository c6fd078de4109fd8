#!/bin/sh
# Runs a command (a make target's test run) while CPU hogs keep every core
# busy, as on a CI runner that shares its machine with another build.
# HOGS hogs (default: one per core); they are killed however the command
# ends, and the command's exit status is the script's.
set -u
HOGS="${HOGS:-$(nproc)}"
pids=""
stop_hogs() {
	# Only the hogs this script started, by pid.
	for p in $pids; do
		kill "$p" 2>/dev/null
	done
	for p in $pids; do
		wait "$p" 2>/dev/null
	done
	pids=""
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
i=0
while [ "$i" -lt "$HOGS" ]; do
	sh -c 'while :; do :; done' &
	pids="$pids $!"
	i=$((i + 1))
done
echo "loaded.sh: $HOGS CPU hogs running (pids$pids) beside: $*" >&2
"$@"
status=$?
stop_hogs
exit "$status"
