# shellcheck shell=bash
# Sourced by the tests that simulate links with nodecomm-launch --netsim (netsim.sh,
# service_netsim.sh, service_jobs.sh, service_share.sh).
#   if why=$(netsim_unavailable); then skip "$why"; fi
# Tries everything the launcher needs once, in a throw-away namespace whose name is no
# launcher's: root, ip/tc/unshare, a namespace with a bridge, a veth pair and tbf. Prints why
# not and succeeds where --netsim cannot run here; fails (prints nothing) where it can.
netsim_unavailable() {
  local ns=nctestprobe$$ tool why
  if [ "$(id -u)" -ne 0 ]; then
    echo "--netsim needs root to create network namespaces (running as uid $(id -u))"
    return 0
  fi
  for tool in ip tc unshare; do
    if ! command -v "$tool" >/dev/null; then
      echo "$tool is not installed (iproute2, util-linux)"
      return 0
    fi
  done
  if ! why=$({ ip netns add $ns && ip -n $ns link add br0 type bridge &&
    ip -n $ns link add name va type veth peer name vb &&
    tc -n $ns qdisc add dev va root tbf rate 1gbit burst 256kb latency 5ms; } 2>&1); then
    ip netns delete $ns 2>/dev/null
    echo "this machine does not allow network namespaces with a bridge, veths and tbf: $why"
    return 0
  fi
  ip netns delete $ns
  return 1
}
