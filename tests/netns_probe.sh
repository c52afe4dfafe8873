# Sourced by the scripts/bench-netns smoke tests, with $probe set to a free name for the probe's
# namespace and veth pair: exits 77 (skipped) where network namespaces, veth pairs or tc's token
# bucket (tbf) cannot be made (not root, or a container that forbids them).
ip netns add "$probe" 2>/dev/null || { echo "skipped: cannot create network namespaces here"; exit 77; }
ip netns del "$probe"
ip link add "$probe" type veth peer name "${probe}p" 2>/dev/null || { echo "skipped: cannot create veth pairs here"; exit 77; }
shaped=0
tc qdisc add dev "$probe" root tbf rate 100mbit burst 64kb latency 200ms 2>/dev/null && shaped=1
ip link del "$probe"
[ "$shaped" = 1 ] || { echo "skipped: tc's token bucket (tbf) is not available here"; exit 77; }
