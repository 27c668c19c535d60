#!/usr/bin/env bash
# Installs the system tools hwc's tests and flows need, when they are missing:
# Icarus Verilog (the RTL simulator cocotb drives). Needs root for apt-get.
set -euo pipefail
if command -v iverilog >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing iverilog (Icarus Verilog) with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq iverilog >/dev/null
  command -v iverilog >/dev/null && exit 0
fi
echo "hwc: Icarus Verilog (iverilog) is needed for RTL simulation and is not installed." >&2
echo "     Install it as root: apt-get install -y iverilog  (Debian/Ubuntu), then run make again." >&2
exit 1
