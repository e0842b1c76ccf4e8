#!/usr/bin/env bash
# Makes sure the few Debian packages this project needs are present.
#   scripts/system_deps.sh demo   -> headless GL (EGL + OSMesa, Mesa's software renderer)
#   scripts/system_deps.sh test   -> the above, plus Xvfb (window tests), redis-server, chromium
# As root it installs what is missing with apt-get; otherwise it names the packages and stops.
set -euo pipefail
purpose="${1:-demo}"

need=()
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
have_lib libEGL_mesa.so.0 || need+=(libegl-mesa0)
have_lib libEGL.so.1 || need+=(libegl1)
have_lib libGL.so.1 || need+=(libgl1)
have_lib libOSMesa.so || need+=(libosmesa6)
[ -e /usr/lib/x86_64-linux-gnu/dri/swrast_dri.so ] || [ -e /usr/lib/aarch64-linux-gnu/dri/swrast_dri.so ] \
  || ls /usr/lib/*/dri/swrast_dri.so >/dev/null 2>&1 || need+=(libgl1-mesa-dri)
if [ "$purpose" = test ]; then
  command -v Xvfb >/dev/null || need+=(xvfb)
  command -v xwininfo >/dev/null || need+=(x11-utils)
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v chromium >/dev/null || need+=(chromium)
fi

[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "async_plotter needs these Debian packages, which are missing: ${need[*]}" >&2
  echo "Install them once with:  sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "Installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
