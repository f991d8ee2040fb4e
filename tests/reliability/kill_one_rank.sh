#!/bin/sh
# Fault injection: starts `MPIEXEC -n NP PROGRAM ARGS...`, waits until the job prints PATTERN (it
# is training), SIGKILLs the newest of its processes, and checks that the whole job then ends
# within LIMIT seconds with a non-zero exit status.
# usage: kill_one_rank.sh LIMIT PATTERN MPIEXEC NP PROGRAM [ARGS...]
limit=$1 pattern=$2 mpiexec=$3 np=$4 program=$5
shift 5
out=$(mktemp)
"$mpiexec" -n "$np" "$program" "$@" > "$out" 2>&1 &
job=$!
i=0
while ! grep -q "$pattern" "$out"; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $job 2>/dev/null; then
    cat "$out"; echo "the job never printed '$pattern'"; kill -9 $job 2>/dev/null; exit 1
  fi
  sleep 0.1
done
victim=$(pgrep -n -f "^$program") || { cat "$out"; echo "no process of $program found"; exit 1; }
echo "killing process $victim of $program with SIGKILL"
kill -9 "$victim"
t0=$(date +%s)
while kill -0 $job 2>/dev/null; do
  if [ $(( $(date +%s) - t0 )) -gt "$limit" ]; then
    cat "$out"; echo "the job did not end within $limit s of the kill"
    pkill -9 -f "^$program"; kill -9 $job 2>/dev/null; exit 1
  fi
  sleep 0.1
done
wait $job
rc=$?
cat "$out"
echo "job ended $(( $(date +%s) - t0 )) s after the kill, exit status $rc"
[ $rc -ne 0 ] || { echo "but it exited 0"; exit 1; }
echo "job ended as expected"
