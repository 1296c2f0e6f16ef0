#!/bin/sh
# step.sh WHAT COMMAND...: prints "make: WHAT", runs COMMAND, and while it runs prints a line every
# 20 seconds saying it still does, with the time taken so far, so that make test has no silent
# stretch (a cold build of sqlc or of every dependency for the race detector prints nothing for
# minutes). Exits with COMMAND's status. COMMAND runs in the foreground, so that an interrupt
# reaches it; the heartbeat in the background ends with this script.
what=$1
shift
echo "make: $what"
parent=$$
(
	n=0
	while sleep 1 && kill -0 "$parent" 2>/dev/null; do
		n=$((n + 1))
		if [ $((n % 20)) -eq 0 ]; then
			echo "make: ... still $what (${n} s)"
		fi
	done
) &
beat=$!
"$@"
rc=$?
kill "$beat" 2>/dev/null
wait "$beat" 2>/dev/null
exit "$rc"
