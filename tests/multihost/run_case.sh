#!/usr/bin/env bash
# run_case.sh CASE CLUSTER DP_TRAINER MP_TRAINER WORKDIR: one multi-host test (tests/multihost/
# multihost.cmake, docs/multihost.md) on hosts made by scripts/netns/cluster.sh. Exit 77 (skipped)
# where hosts cannot be made (not root, a container without CAP_NET_ADMIN).
#   data_parallel         DataParallel on 2 hosts ends as on one host, its gradients over the link
#   model_parallel_resume ModelParallel split across 2 hosts checkpoints; resumed on 1 host, it
#                         ends as the uninterrupted run
#   link_cut              one host's link cut mid-training: the watchdog ends the job within the
#                         timeout plus a few seconds, on both hosts; the last checkpoint resumes
set -uo pipefail
case_name=$1 cluster=$2 dp=$3 mp=$4 work=$5
export KDIST_NETNS_PREFIX=kdt KDIST_NETNS_SUBNET=10.78.0
"$cluster" check || exit 77
rm -rf "$work" && mkdir -p "$work"
trap '"$cluster" down' EXIT

fail() {
  echo "FAILED: $*" >&2
  exit 1
}
# run LOG CMD...: CMD with its output in LOG; fails the test when CMD fails.
run() {
  local log=$1
  shift
  timeout 300 "$@" > "$log" 2>&1 || fail "$* exited with $? (output: $log):
$(tail -30 "$log")"
}
test_metrics() { grep -o "Test loss: [0-9.]* - Test accuracy: [0-9.]*" "$1"; }
same_metrics() {
  local a b
  a=$(test_metrics "$1") b=$(test_metrics "$2")
  echo "$3: $a | $4: $b"
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$3 and $4 differ: '$a' vs '$b'"
}
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
sent_bytes() { cat "/sys/class/net/kdt-v$1/statistics/rx_bytes"; }  # what host $1 sent

case "$case_name" in
  data_parallel)
    flags=(--epochs 1 --steps 5)
    run "$work/one_host.log" mpiexec.hydra -n 2 "$dp" "${flags[@]}"
    "$cluster" up 2 1gbit 0us > /dev/null
    before=$(sent_bytes 1)
    run "$work/two_hosts.log" "$cluster" run 2 -n 2 -ppn 1 "$dp" "${flags[@]}"
    sent=$(($(sent_bytes 1) - before))
    echo "host 1 sent $sent bytes over its link"
    # 5 all-reduces of the 784x200 kernel's gradient (627 kB each) alone send 3.1 MB
    ((sent > 2500000)) || fail "host 1 sent only $sent bytes: the processes did not talk over the link"
    same_metrics "$work/one_host.log" "$work/two_hosts.log" "one host" "two hosts"
    ;;
  model_parallel_resume)
    common=(--steps 5 --batch-size 64)
    run "$work/whole.log" mpiexec.hydra -n 2 "$mp" --mesh 1x2 --epochs 2 "${common[@]}"
    "$cluster" up 2 > /dev/null
    run "$work/first.log" "$cluster" run 2 -n 2 -ppn 1 "$mp" --mesh 1x2 --epochs 1 "${common[@]}" \
      --checkpoint-dir "$work/ckpt"
    grep -q "Saved .*checkpoint.h5 (epoch 1)" "$work/first.log" || fail "no checkpoint saved"
    run "$work/second.log" "$cluster" run 1 -n 2 "$mp" --mesh 2x1 --epochs 2 "${common[@]}" \
      --checkpoint-dir "$work/ckpt" --resume
    grep -q "Resumed from .*checkpoint.h5: epoch 1" "$work/second.log" || fail "no resume line"
    same_metrics "$work/whole.log" "$work/second.log" "uninterrupted, one host" \
      "(1, 2) on 2 hosts, resumed as (2, 1) on 1 host"
    ;;
  link_cut)
    timeout_s=4
    "$cluster" up 2 > /dev/null
    flags=(--epochs 3 --steps 300 --checkpoint-dir "$work/ckpt")
    KDIST_COLLECTIVE_TIMEOUT=$timeout_s timeout 120 "$cluster" run 2 -n 2 -ppn 1 \
      -genv KDIST_COLLECTIVE_TIMEOUT $timeout_s "$dp" "${flags[@]}" > "$work/cut.log" 2>&1 &
    job=$!
    for _ in $(seq 600); do
      grep -q "Saved .*(epoch 1)" "$work/cut.log" && break
      sleep 0.1
    done
    grep -q "Saved .*(epoch 1)" "$work/cut.log" || fail "no checkpoint after epoch 1:
$(cat "$work/cut.log")"
    cut=$(date +%s.%N)
    "$cluster" link 1 down
    wait $job
    rc=$?
    took=$(since "$cut")
    echo "the job ended ${took} s after the cut, exit status $rc"
    cat "$work/cut.log"
    ((rc != 0 && rc != 124)) || fail "the job did not end by itself with an error (status $rc)"
    awk -v t="$took" -v limit=$((timeout_s + 10)) 'BEGIN { exit !(t < limit) }' ||
      fail "the job took $took s to end"
    # The checkpoint is written in the background (kdist::AsyncCheckpointer): "Saved ... (epoch 1)"
    # may come once epoch 2 has trained, so the cut falls in epoch 2 or 3 (and the writer of the
    # next save may report it too).
    grep -q "all_reduce on mesh axis 'batch' (2 processes) did not complete within $timeout_s s" \
      "$work/cut.log" && grep -q "during fit, epoch [23], step [0-9]*: process 1\( ([^)]*)\)\? did not arrive" \
      "$work/cut.log" || fail "the watchdog's message is missing or does not name the collective"
    # The cut-off host's process cannot reach the launcher: it must end itself (MPI_Abort's way out).
    for _ in $(seq 200); do
      ip netns pids kdt-h1 | xargs -r ps -o comm= -p | grep -q data_parallel || break
      sleep 0.1
    done
    ended=$(since "$cut")
    ip netns pids kdt-h1 | xargs -r ps -o comm= -p | grep -q data_parallel &&
      fail "the cut-off host's process still runs $ended s after the cut"
    echo "the cut-off host's process ended ${ended} s after the cut"
    "$cluster" link 1 up
    run "$work/resume.log" "$cluster" run 1 -n 2 "$dp" "${flags[@]}" --resume
    grep -q "Resumed from .*checkpoint.h5: epoch [12]" "$work/resume.log" || fail "no resume line:
$(cat "$work/resume.log")"
    grep -q "Test loss" "$work/resume.log" || fail "the resumed run did not finish"
    ;;
  *) fail "no case '$case_name'" ;;
esac
echo "multihost $case_name passed"
