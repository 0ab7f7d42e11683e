#!/bin/sh
# Remove every namespace, pinned XDP object and state file of a fabric testbed, without the
# `fabric` binary (e.g. on a runner where it was never built). Same effect as `fabric down`.
# Usage: cleanup.sh [PREFIX]   (default prefix: fab)
set -eu
prefix=${1:-fab}
n=0
for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}-" || true); do
    ip netns del "$ns"
    n=$((n + 1))
done
rm -rf "/sys/fs/bpf/fabric/${prefix}" "/run/fabric/${prefix}"
echo "testbed ${prefix}: removed ${n} namespaces, pins and state"
