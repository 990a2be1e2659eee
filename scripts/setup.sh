#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian 12 machine (as root): system packages, then the
# project virtualenv at .venv with railfabric installed editable with its dev extras.
set -euo pipefail
cd "$(dirname "$0")/.."

# iproute2: namespaces and veths for integration tests and labs; ethtool/tcpdump: lab
# diagnostics; mininet: the lab topology engine (and mnexec); lldpd: LLDP on the lab's servers,
# as real servers speak it; prometheus: promtool, which checks the daemons' /metrics;
# etcd-server, etcd-client: the HA store's tests and lab start their own etcd members on loopback
# ports and turn their authentication on with etcdctl;
# chromium, chromium-driver: the web view's browser test (headless, driven by Selenium).
APT_PACKAGES=(python3 python3-venv python3-dev build-essential iproute2 iputils-ping ethtool tcpdump mininet make git lldpd prometheus etcd-server etcd-client chromium chromium-driver)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# The packages' bytecode, as installing a wheel writes it: an editable install leaves it to the
# first import, which writes none where PYTHONDONTWRITEBYTECODE is set, and then every railctl
# command compiled its modules again (~0.15 s a call). A stale file is only compiled anew.
.venv/bin/python -m compileall -q -j 0 railfabric agent controller softswitch mininet_labs bench
echo "setup: ready (.venv)"
