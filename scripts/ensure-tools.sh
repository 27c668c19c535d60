#!/usr/bin/env bash
# Installs the system tools hwc's tests and flows need, when they are missing (idempotent:
# nothing happens when all are there). Needs root for apt-get; `apt-get update` runs once.
#   iverilog  Icarus Verilog, the RTL simulator cocotb drives
#   gcc, make the CPU backend links model.o for its runner and builds the bundle's main.c
#   valgrind  the CPU bundle's memcheck test
#   chromium, chromedriver  headless Chromium, which renders report.html in tests/report
set -euo pipefail
# command -> Debian package
declare -A PKG=([iverilog]=iverilog [gcc]=gcc [make]=make [valgrind]=valgrind [chromium]=chromium
                [chromedriver]=chromium-driver)
CMDS=(iverilog gcc make valgrind chromium chromedriver)
missing=()
for cmd in "${CMDS[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${PKG[$cmd]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
  still=()
  for cmd in "${CMDS[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || still+=("$cmd")
  done
  [ ${#still[@]} -eq 0 ] && exit 0
  missing=("${still[@]}")
fi
echo "hwc: these tools are needed and not installed: ${missing[*]}" >&2
echo "     (iverilog: RTL simulation; gcc, make: CPU bundles; valgrind: the CPU memcheck test;" >&2
echo "      chromium, chromium-driver: the browser test of report.html)." >&2
echo "     Install them as root: apt-get install -y ${missing[*]}  (Debian/Ubuntu), then run make again." >&2
exit 1
