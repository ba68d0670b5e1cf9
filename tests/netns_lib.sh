# tests/netns_lib.sh — two "hosts" on one machine for the remote-worker experiments (sourced by
# tests/netns_remote.sh and bench/netns_latency.sh): two network namespaces joined by a veth pair, each end with
# an address of a /24 of its own, and the added latency of the link (tc netem where the kernel has it, else the
# relay tests/netdelay.py in the worker's namespace). Root only (CAP_NET_ADMIN); the caller skips otherwise.
#
#   netns_setup          creates them: $NS_C, $NS_W (namespaces), $VETH_C, $VETH_W, $ADDR_C, $ADDR_W; 1 with
#                        $NETNS_WHY when it cannot
#   netns_cleanup        removes them (and the relay)
#   netns_delay MS PORT  adds MS ms each way between the worker and the coordinator's PORT and PORT+1: sets
#                        $NETNS_METHOD (netem or relay) and $NETNS_TARGET, the address the worker connects to
#                        (the coordinator's, or the relay's); MS 0 removes any delay
#   netns_link up|down   the worker's end of the link (down: the worker's host drops off the network)
#   in_c CMD... / in_w CMD...  run CMD in the coordinator's / worker's namespace
# The caller sets NETNS_PY to the path of tests/netdelay.py.

NS_C="guild-c-$$"
NS_W="guild-w-$$"
VETH_C="gc$$"
VETH_W="gw$$"
NET="10.$((200 + $$ % 50)).$((($$ / 50) % 250))"
ADDR_C="$NET.1"
ADDR_W="$NET.2"
NETNS_RELAY=""
NETNS_METHOD=none
NETNS_TARGET=$ADDR_C
NETNS_WHY=""

in_c() { ip netns exec "$NS_C" "$@"; }
in_w() { ip netns exec "$NS_W" "$@"; }

netns_setup() {
    if [ "$(id -u)" -ne 0 ]; then
        NETNS_WHY="not root (network namespaces and a veth pair need CAP_NET_ADMIN)"
        return 1
    fi
    if ! command -v ip >/dev/null 2>&1; then
        NETNS_WHY="no ip command (iproute2)"
        return 1
    fi
    if ! out=$(ip netns add "$NS_C" 2>&1 && ip netns add "$NS_W" 2>&1 &&
        ip link add "$VETH_C" type veth peer name "$VETH_W" 2>&1 &&
        ip link set "$VETH_C" netns "$NS_C" 2>&1 && ip link set "$VETH_W" netns "$NS_W" 2>&1 &&
        ip -n "$NS_C" addr add "$ADDR_C/24" dev "$VETH_C" 2>&1 && ip -n "$NS_W" addr add "$ADDR_W/24" dev "$VETH_W" 2>&1 &&
        ip -n "$NS_C" link set "$VETH_C" up 2>&1 && ip -n "$NS_W" link set "$VETH_W" up 2>&1 &&
        ip -n "$NS_C" link set lo up 2>&1 && ip -n "$NS_W" link set lo up 2>&1); then
        NETNS_WHY="cannot make network namespaces and a veth pair: $out"
        netns_cleanup
        return 1
    fi
    return 0
}

netns_cleanup() {
    [ -n "$NETNS_RELAY" ] && kill "$NETNS_RELAY" 2>/dev/null
    NETNS_RELAY=""
    ip netns del "$NS_C" 2>/dev/null
    ip netns del "$NS_W" 2>/dev/null
    ip link del "$VETH_C" 2>/dev/null
    return 0
}

netns_delay() { # ms port
    ms=$1
    port=$2
    if [ -n "$NETNS_RELAY" ]; then
        kill "$NETNS_RELAY" 2>/dev/null
        wait "$NETNS_RELAY" 2>/dev/null
    fi
    NETNS_RELAY=""
    in_c tc qdisc del dev "$VETH_C" root 2>/dev/null
    in_w tc qdisc del dev "$VETH_W" root 2>/dev/null
    NETNS_TARGET=$ADDR_C
    NETNS_METHOD=none
    [ "$ms" = 0 ] && return 0
    if in_c tc qdisc add dev "$VETH_C" root netem delay "${ms}ms" 2>/dev/null &&
        in_w tc qdisc add dev "$VETH_W" root netem delay "${ms}ms" 2>/dev/null; then
        NETNS_METHOD=netem
        return 0
    fi
    in_c tc qdisc del dev "$VETH_C" root 2>/dev/null
    # no sch_netem: the relay, in the worker's namespace, in front of both of the coordinator's ports
    fifo=$(mktemp -u)
    mkfifo "$fifo" || return 1
    # (not through in_w: a function in the background is a subshell, and $! would not be the relay)
    ip netns exec "$NS_W" "${PYTHON:-python3}" "$NETNS_PY" --delay-ms "$ms" --map "$port:$ADDR_C:$port" \
        --map "$((port + 1)):$ADDR_C:$((port + 1))" >"$fifo" &
    NETNS_RELAY=$!
    read -r line <"$fifo"
    rm -f "$fifo"
    [ "$line" = ready ] || return 1
    NETNS_METHOD=relay
    NETNS_TARGET=127.0.0.1
    return 0
}

netns_link() { # up|down
    ip -n "$NS_W" link set "$VETH_W" "$1"
}
