#!/usr/bin/env bash
# 50,000 ConfigMaps deployed once; then no-op, plan (1 % changed) and status
# with each binary in turn, three rounds; then a prune of half and the
# rollback with each binary, one round. Wall time and peak RSS.
set -u
cd /work/main
export KIX_CP_DIR=/tmp/kix-prof-cp
checks/control-plane up >/dev/null
export KUBECONFIG=$KIX_CP_DIR/admin.kubeconfig
w=/tmp/bench/after-scale/workload-50000
v0=$(nix-store --add $w/v0/kix-tree) v1=$(nix-store --add $w/v1/kix-tree) v2=$(nix-store --add $w/v2/kix-tree)
declare -A bin=([before]=/tmp/kix-before-bin [after]=/tmp/kix-after-bin)
t() { # label binary args...
  local label=$1 which=$2; shift 2
  /usr/bin/time -f "%e %M" -o /tmp/bench/t.out "${bin[$which]}" "$@" >/dev/null 2>/tmp/bench/err.out || { echo "$label $which FAILED"; tail -3 /tmp/bench/err.out; }
  read -r secs kb < /tmp/bench/t.out
  echo "$label $which ${secs}s $((kb/1024))MB"
}
t first after deploy bench --path $v0 --yes --timeout 30m
for round in 1 2 3; do
  for which in before after; do t noop $which deploy bench --path $v0 --yes; done
  for which in before after; do t plan $which plan bench --path $v1; done
  for which in before after; do t status $which status bench; done
done
for which in before after; do
  t prune $which deploy bench --path $v2 --yes --accept-deletions --accept-migrations --timeout 30m
  t rollback $which rollback bench --yes --timeout 30m --accept-deletions --accept-migrations
done
checks/control-plane down >/dev/null
echo INTERLEAVED DONE
