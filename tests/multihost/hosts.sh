# Two simulated hosts on this machine, for multi-host tests (source this file from bash).
#
# A "host" is a network namespace with a host name of its own: ls-host-a and ls-host-b, joined by a
# veth pair (ls-veth-a <-> ls-veth-b) with the two addresses of a private /30
# ($LOCKSTEP_MULTIHOST_SUBNET.1 and .2, default 10.213.77.0/30). Processes started on a host see
# only that link and loopback, and gethostname() returns the host's name (a UTS namespace per
# launch), so Open MPI treats the two as separate nodes: shared memory inside each, TCP between.
# mpirun itself runs on ls-host-a; its daemon on ls-host-b is started through netns_rsh.sh instead
# of ssh. No traffic leaves the pair: both Open MPI's control channel (oob) and its data transport
# (btl) are restricted to the /30.
#
#   source hosts.sh
#   multihost_require_root           # exit 77 (CTest: skipped) with the reason when not root
#   hosts_up                         # creates both hosts; tears them down on any exit or signal
#   multihost_mpirun -np 2 PROGRAM   # mpirun on ls-host-a with HOSTFILE (one slot per host)
#   on_host ls-host-b COMMAND...     # any command on a host
#   kill_host ls-host-b              # SIGKILL every process of a host
#   hosts_down                       # idempotent; also called by the exit trap
#   multihost_finish $status         # hosts_down, then checks that nothing is left; exits
#
# Namespaces and veths are names in the kernel, not files: an interrupted run that skipped its
# trap leaves them behind, and the next hosts_up removes them first.

MULTIHOST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MULTIHOST_SUBNET=${LOCKSTEP_MULTIHOST_SUBNET:-10.213.77}
MULTIHOST_HOSTS=(ls-host-a ls-host-b)
declare -A MULTIHOST_ADDR=([ls-host-a]=$MULTIHOST_SUBNET.1 [ls-host-b]=$MULTIHOST_SUBNET.2)
declare -A MULTIHOST_VETH=([ls-host-a]=ls-veth-a [ls-host-b]=ls-veth-b)
MULTIHOST_WORK=
HOSTFILE=

multihost_require_root() {
  local why=
  if [ "$(id -u)" != 0 ]; then
    why="needs root to create network namespaces (ip netns add); run as root, as CI does"
  elif ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
    why="needs ip (iproute2) and unshare (util-linux)"
  elif ! ip netns add ls-host-probe 2>/dev/null; then
    why="this kernel or container refuses to create network namespaces"
  else
    ip netns del ls-host-probe
    return 0
  fi
  echo "SKIPPED: multi-host test $why."
  exit 77
}

hosts_down() {
  local h
  for h in "${MULTIHOST_HOSTS[@]}"; do
    if ip netns list | grep -qw "^$h"; then
      kill_host "$h"
      ip netns del "$h"  # also removes its end of the veth pair, and with it the pair
    fi
    rm -rf "/etc/netns/$h"
  done
  rmdir /etc/netns 2>/dev/null
  [ -n "$MULTIHOST_WORK" ] && rm -rf "$MULTIHOST_WORK"
  MULTIHOST_WORK=
  return 0
}

hosts_up() {
  trap 'hosts_down' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  hosts_down
  local h
  for h in "${MULTIHOST_HOSTS[@]}"; do ip netns add "$h" || return 1; done
  ip link add ls-veth-a netns ls-host-a type veth peer name ls-veth-b netns ls-host-b || return 1
  for h in "${MULTIHOST_HOSTS[@]}"; do
    ip -n "$h" link set lo up &&
      ip -n "$h" addr add "${MULTIHOST_ADDR[$h]}/30" dev "${MULTIHOST_VETH[$h]}" &&
      ip -n "$h" link set "${MULTIHOST_VETH[$h]}" up || return 1
    # A TCP peer that stops acknowledging (a partition, a host that lost power) is given up after
    # 5 retransmissions (about 13 s) instead of Linux's default 15 (about 15 minutes): Open MPI's
    # daemons then notice a lost host and end, where they would otherwise wait on it for a quarter
    # of an hour. It must stay longer than the collectives' timeout, or Open MPI's own transport
    # error ends the ranks before they report (docs/distributed.md, "Failures across hosts").
    ip netns exec "$h" sysctl -qw net.ipv4.tcp_retries2=5 || return 1
    # `ip netns exec` puts /etc/netns/<name>/hosts in place of /etc/hosts: both names resolve on
    # both hosts, to the addresses of the pair.
    mkdir -p "/etc/netns/$h"
    {
      echo "127.0.0.1 localhost"
      for peer in "${MULTIHOST_HOSTS[@]}"; do echo "${MULTIHOST_ADDR[$peer]} $peer"; done
    } >"/etc/netns/$h/hosts"
  done
  MULTIHOST_WORK=$(mktemp -d /tmp/lockstep-multihost.XXXXXX)
  chmod 755 "$MULTIHOST_WORK"
  HOSTFILE=$MULTIHOST_WORK/hostfile
  printf '%s slots=1\n' "${MULTIHOST_HOSTS[@]}" >"$HOSTFILE"
  # Both ends of the pair must be up (carrier on) before a test relies on the link.
  local _
  for _ in $(seq 50); do
    ip -n ls-host-a link show ls-veth-a | grep -q 'state UP' &&
      ip -n ls-host-b link show ls-veth-b | grep -q 'state UP' && return 0
    sleep 0.1
  done
  echo "hosts_up: the veth pair did not come up"
  return 1
}

on_host() {
  local h=$1
  shift
  ip netns exec "$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

kill_host() {
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  return 0
}

# mpirun on ls-host-a over both hosts, ended after $MULTIHOST_TIMEOUT seconds (default 300) if it
# hangs. Extra arguments follow the fixed ones (so -np, -x, --mca and the program go there);
# MULTIHOST_BTL replaces the transports (default self,vader,tcp).
multihost_mpirun() {
  timeout -k 5 "${MULTIHOST_TIMEOUT:-300}" \
    ip netns exec ls-host-a unshare --uts sh -c 'hostname "$0" && exec "$@"' ls-host-a env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --hostfile "$HOSTFILE" --bind-to none \
    --mca plm_rsh_agent "$MULTIHOST_DIR/netns_rsh.sh" \
    --mca btl "${MULTIHOST_BTL:-self,vader,tcp}" --mca btl_tcp_if_include "$MULTIHOST_SUBNET.0/30" \
    --mca oob_tcp_if_include "$MULTIHOST_SUBNET.0/30" "$@"
}

# Waits (at most $2 seconds) until no process is left on either host; returns 1 and lists them
# otherwise.
wait_hosts_empty() {
  local _ h left
  for _ in $(seq $(($1 * 10))); do
    left=
    for h in "${MULTIHOST_HOSTS[@]}"; do left+=$(ip netns pids "$h" 2>/dev/null); done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  for h in "${MULTIHOST_HOSTS[@]}"; do
    for p in $(ip netns pids "$h" 2>/dev/null); do echo "left on $h: $(ps -o pid=,args= -p "$p")"; done
  done
  return 1
}

# Tears the hosts down and checks that no namespace or veth of ours is left; exits with the test's
# status (1 if anything is left).
multihost_finish() {
  local status=$1
  hosts_down
  trap - EXIT
  if ip netns list | grep -q '^ls-host-'; then
    echo "FAIL: namespaces left after teardown: $(ip netns list | tr '\n' ' ')"
    status=1
  fi
  if ip link show 2>/dev/null | grep -q 'ls-veth-'; then
    echo "FAIL: veth left after teardown"
    status=1
  fi
  [ "$status" = 0 ] && echo PASS
  exit "$status"
}

# Waits until FILE contains a line matching PATTERN (grep -E) or PID has ended; returns 1 in the
# second case. The bound (at most $4 seconds) only ends a run that never gets there.
wait_for_line() {
  local file=$1 pattern=$2 pid=$3 _
  for _ in $(seq $((${4:-120} * 10))); do
    grep -Eq "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -Eq "$pattern" "$file" 2>/dev/null
}
