#!/usr/bin/env bash
# Unpacks Suricata 7.0.10 (Debian bookworm-backports' package and the
# libraries it needs that the machine lacks) into DIR, without installing
# anything, to run the Scapy-built verification tests through the real
# Suricata (scripts/suricata-check.py). A development tool: nothing in the
# test suite needs it.
#
# usage: scripts/suricata-reference.sh [DIR]    (default /tmp/suri)
# then:  scripts/suricata-check.py ROOT [PREFIX...]   (SURICATA_ROOT=DIR/root)
set -euo pipefail
dir=${1:-/tmp/suri}
mkdir -p "$dir/debs" "$dir/root"
dir=$(cd "$dir" && pwd)
list=$(mktemp)
trap 'rm -f "$list"' EXIT
printf '%s\n' "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-backports main" >"$list"
opts=(-o Dir::Etc::sourcelist="$list" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0)
apt-get -qq "${opts[@]}" update
cd "$dir/debs"
# The package and the libraries it loads that a bookworm machine lacks
# (found with ldd on one; DPDK's come with the package's DPDK support).
apt-get -qq "${opts[@]}" download suricata/bookworm-backports libhtp2/bookworm-backports \
    libevent-pthreads-2.1-7 libfdt1 libhiredis0.14 libnet1 libnetfilter-log1 \
    libnetfilter-queue1 libnfnetlink0 librte-bus-pci23 librte-bus-vdev23 librte-eal23 \
    librte-ethdev23 librte-hash23 librte-ip-frag23 librte-kvargs23 librte-mbuf23 \
    librte-mempool23 librte-meter23 librte-net-bond23 librte-net23 librte-pci23 \
    librte-rcu23 librte-ring23 librte-sched23 librte-telemetry23 2>/dev/null
libs="$dir/root/usr/lib/x86_64-linux-gnu"
for d in "$dir"/debs/*.deb; do dpkg -x "$d" "$dir/root"; done
missing=$(LD_LIBRARY_PATH=$libs ldd "$dir/root/usr/bin/suricata" | awk '/not found/ {print $1}' | sort -u)
if [ -n "$missing" ]; then
    echo "suricata-reference: libraries still missing: $missing" >&2
    exit 1
fi
cat >"$dir/suricata.sh" <<WRAP
#!/bin/sh
exec env LD_LIBRARY_PATH=$libs $dir/root/usr/bin/suricata "\$@"
WRAP
chmod +x "$dir/suricata.sh"
"$dir/suricata.sh" -V
