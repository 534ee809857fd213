#!/bin/sh
# Open MPI's remote launcher for the simulated hosts of hosts.sh (`--mca plm_rsh_agent`). Open MPI
# calls it as it would call ssh, `<agent> [options] <host> <command line>`, to start its daemon
# (orted) on <host>, and takes the agent's exit as the end of that daemon's session. Instead of
# logging in somewhere, this runs the command line in <host>'s network namespace, in a UTS namespace
# of its own whose host name is <host>, and waits for it, as the ssh client would.
while [ $# -gt 0 ]; do
  case $1 in
    -*) shift ;;  # ssh options (none are needed to enter a namespace)
    *) break ;;
  esac
done
host=$1
shift
ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
status=$?
# An ssh client learns that the remote session ended over the network. When the host's processes
# are killed but its network is up, its kernel closes the connection and ssh ends at once. When the
# host is cut off (its link down: a partition, a power loss), nothing reaches the client until TCP
# gives up, about 13 s with the hosts' net.ipv4.tcp_retries2=5: model that, so that Open MPI does
# not learn of the loss sooner than it would over a real network.
if [ $status -gt 128 ]; then
  for _ in $(seq 130); do
    ip -n "$host" link show 2>/dev/null | grep -q 'ls-veth-.*state DOWN' || break
    sleep 0.1
  done
  exit 255
fi
exit $status
