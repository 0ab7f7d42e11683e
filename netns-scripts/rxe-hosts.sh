#!/bin/sh
# Soft-RoCE (rxe) hosts on a testbed, in plain shell: what `fabric up --endpoints rxe` does after
# building the switches, and what `fabric down` undoes (see fabric-user/src/rxe.rs). For a CI
# runner or VM whose kernel has rdma_rxe (`modprobe rdma_rxe`; on Ubuntu it is in
# linux-modules-extra-$(uname -r)).
#
# Usage: rxe-hosts.sh up [PREFIX]     after `fabric up` (own endpoints: one namespace per host)
#        rxe-hosts.sh down [PREFIX]   before or after `fabric down` (safe to repeat)
#
# rxe (up to at least 6.12) opens its UDP/4791 socket only in the initial network namespace, so
# `up` moves each host's veth from its namespace into this one as PREFIX-HOST, gives it the host's
# address, and forces host-to-host traffic out through the host's RTSW with policy routing:
#   pref 50 iif VETH lookup local; pref 100 from HOST-IP lookup TABLE; pref 1000 lookup local
#   (moved from pref 0); TABLE: default via RTSW-IP dev VETH; rp_filter 0, accept_local 1
# then `rdma link add PREFIX_HOST type rxe netdev VETH`. Names and table numbers are the ones
# `fabric` uses, so either tool can clean up after the other.
set -eu
action=${1:-}
prefix=${2:-fab}

# The first policy-routing table of a prefix: 0x0fab0000 | (FNV-1a(prefix) & 0xff) << 8.
table_base() {
    h=2166136261
    for b in $(printf '%s' "$1" | od -An -tu1); do
        h=$(( ((h ^ b) * 16777619) & 0xffffffff ))
    done
    echo $(( 0x0fab0000 | ((h & 0xff) << 8) ))
}

# Host namespaces: PREFIX-<zone>r<rack>h<host>.
hosts() {
    ip netns list | awk '{print $1}' | grep -E "^${prefix}-[a-z][a-z0-9]*r[0-9]+h[0-9]+$" | sort || true
}

# RXE_HOSTS_NO_DEVICES=1: build the layout without the rxe devices (testing it without rxe).
no_devices=${RXE_HOSTS_NO_DEVICES:-0}

up() {
    if [ "$no_devices" != 1 ]; then
        modprobe rdma_rxe 2>/dev/null || true
        [ -d /sys/module/rdma_rxe ] || { echo "rxe-hosts: no rdma_rxe module in this kernel" >&2; exit 1; }
    fi
    base=$(table_base "$prefix")
    i=0
    sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    ip rule show pref 1000 | grep -q "lookup local" || ip rule add pref 1000 lookup local
    ip rule show pref 0 | grep -q "lookup local" && ip rule del pref 0 lookup local
    for ns in $(hosts); do
        host=${ns#"${prefix}"-}
        veth=${prefix}-${host}
        old=$(ip -n "$ns" -o link show 2>/dev/null | awk -F': ' '$2 != "lo" {print $2}' | cut -d@ -f1 | head -n1)
        addr=$(ip -n "$ns" -4 -o addr show dev "$old" | awk '{print $4}' | head -n1)
        ip4=${addr%/*}
        # The host is the odd end of its /31: its RTSW is the address minus one.
        last=${ip4##*.}
        gw=${ip4%.*}.$((last - 1))
        gwmac=$(ip -n "$ns" neigh show "$gw" dev "$old" | awk '{print $3}')
        ip -n "$ns" link set dev "$old" xdp off 2>/dev/null || true
        ip -n "$ns" link set dev "$old" down
        ip -n "$ns" link set dev "$old" name "$veth"
        ip -n "$ns" link set dev "$veth" netns $$
        ip netns del "$ns"
        table=$((base + i))
        ip addr add "$ip4/31" dev "$veth"
        [ -n "$gwmac" ] && ip neigh replace "$gw" lladdr "$gwmac" dev "$veth" nud permanent
        ethtool -K "$veth" tx off >/dev/null 2>&1 || true
        # Frames the RTSW redirects into a veth need NAPI on it: GRO turns it on without XDP.
        ethtool -K "$veth" gro on >/dev/null 2>&1 || true
        ip link set dev "$veth" up
        sysctl -qw "net.ipv4.conf.${veth}.rp_filter=0" "net.ipv4.conf.${veth}.accept_local=1"
        ip route replace default via "$gw" dev "$veth" table "$table"
        ip rule add pref 50 iif "$veth" lookup local
        ip rule add pref 100 from "$ip4" lookup "$table"
        [ "$no_devices" = 1 ] || rdma link add "${prefix}_${host}" type rxe netdev "$veth"
        echo "rxe host $host: ${prefix}_${host} on $veth ($ip4), table $table"
        i=$((i + 1))
    done
    [ "$i" -gt 0 ] || { echo "rxe-hosts: no host namespaces ${prefix}-* (run fabric up first)" >&2; exit 1; }
}

down() {
    base=$(table_base "$prefix")
    n=0
    for dev in $(ls /sys/class/infiniband 2>/dev/null); do
        case $dev in "${prefix}"_*) rdma link delete "$dev" && n=$((n + 1)) ;; esac
    done
    # Rules of the prefix's tables and of its veths (also detached ones).
    ip -4 rule show | while IFS= read -r line; do
        pref=${line%%:*}
        t=$(echo "$line" | sed -n 's/.*lookup \([0-9][0-9]*\).*/\1/p')
        ours=no
        case $line in *"iif ${prefix}-"*) ours=yes ;; esac
        if [ -n "$t" ] && [ "$t" -ge "$base" ] && [ "$t" -lt $((base + 256)) ]; then ours=yes; fi
        [ "$ours" = yes ] || continue
        sel=$(echo "${line#*:}" | sed 's/\[detached\]//')
        # shellcheck disable=SC2086
        ip rule del pref "$pref" $sel 2>/dev/null || true
    done
    for veth in $(ip -o link show type veth | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${prefix}-" || true); do
        ip link del "$veth" && n=$((n + 1))
    done
    # The local rule goes back to pref 0 unless another testbed still has rxe hosts.
    others=$(ls /run/fabric/*/rxe.json 2>/dev/null | grep -v "/run/fabric/${prefix}/" | wc -l)
    if [ "$others" -eq 0 ]; then
        ip rule show pref 0 | grep -q "lookup local" || ip rule add pref 0 lookup local
        while ip rule show pref 1000 | grep -q "^1000:.*from all lookup local"; do ip rule del pref 1000 lookup local; done
    fi
    rm -f "/run/fabric/${prefix}/rxe.json"
    echo "rxe-hosts ${prefix}: removed ${n} rxe devices and veths, their rules and tables"
}

case $action in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down [PREFIX]" >&2; exit 2 ;;
esac
