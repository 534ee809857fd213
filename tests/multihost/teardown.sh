#!/bin/bash
# The multi-host tests' CTest fixture cleanup: CTest runs it after them even when one failed or
# timed out. A test that CTest ends for its timeout is killed outright, so its own trap never
# removes the hosts; this does (their processes, namespaces, veth pair and /etc/netns entries) and
# fails when any namespace or veth of theirs is still there.
#   teardown.sh
set -u
source "$(dirname "$0")/hosts.sh"
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: not root, so the multi-host tests created no hosts to remove."
  exit 77
fi
multihost_finish 0
