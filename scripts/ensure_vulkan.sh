#!/usr/bin/env bash
# Makes sure a machine without a GPU has the Vulkan driver the tests and the table run on: Mesa's
# software driver (lavapipe) of Mesa 25 or later. Dawn refuses Mesa 22's (Debian 12's own:
# "Vulkan shaderUniform*ArrayDynamicIndexing required"); Mesa 25's, from bookworm-backports on
# Debian 12, serves Dawn and wgpu alike.
#
# Does nothing where Mesa 25 or later is installed, or a GPU is there (VK_DRIVER_FILES or
# VK_ICD_FILENAMES set, as .gpu/setup.sh does; nvidia-smi; a /dev/dri render node) unless
# `always` is given (CI). Installs through apt as root; otherwise prints one line saying what to
# install and leaves the machine as it is.
#
#   bash scripts/ensure_vulkan.sh [TAG [always]]    # TAG prefixes its lines (default: dev)
set -euo pipefail
tag="${1:-dev}"
mesa_major() {
  dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | sed -E 's/^([0-9]+:)?([0-9]+).*/\2/'
}
if [ "${2:-}" != always ] && { [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] ||
  command -v nvidia-smi >/dev/null || compgen -G '/dev/dri/renderD*' >/dev/null; }; then
  exit 0
fi
if [ "$(mesa_major)" -ge 25 ] 2>/dev/null; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "$tag: no Mesa 25 lavapipe here: install mesa-vulkan-drivers 25 or later (Debian 12: from" \
    "bookworm-backports) for the tests and the table on a machine without a GPU" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "$tag: adding bookworm-backports to apt's sources" >&2
    echo "deb http://deb.debian.org/debian bookworm-backports main" \
      >/etc/apt/sources.list.d/bookworm-backports.list
  fi
  echo "$tag: installing Mesa's lavapipe from bookworm-backports" >&2
  apt-get update -qq
  apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers >/dev/null
else
  echo "$tag: installing mesa-vulkan-drivers (lavapipe)" >&2
  apt-get update -qq && apt-get install -y -qq mesa-vulkan-drivers >/dev/null
fi
