#!/usr/bin/env bash
# Packs .gpu/ (ignored by git): what an offline Linux x86-64 GPU host needs to run this project
# through Vulkan, so that the working tree plus .gpu/ is all that travels:
#   .gpu/deno.xz          the pinned deno binary (the one ./dev runs), xz-compressed
#   .gpu/debs/*.deb       Debian's Vulkan loader and libglvnd's GL dispatch libraries (the NVIDIA
#                         Vulkan driver links against them), unpacked on the host by setup.sh
#   .gpu/deno_dir.tar.xz  a DENO_DIR holding every npm package the entry points import, and Dawn's
#                         (npm:webgpu, imported dynamically by gpu/engine.ts) with only its
#                         linux-x64 build
#   .gpu/setup.sh         sourced on the host from the repository root:
#                           source .gpu/setup.sh; ./dev task table3
# Usage: ./dev task gpu-bundle [ENTRY.ts ...]   (default: mod.ts and every .ts under bench/, scripts/)
# Needs: network access to npm and Debian's archive here; xz, tar, apt-get.
# Exit: 0 done; 1 a step failed (named on stderr); 2 bad arguments.
set -euo pipefail

die() { echo "gpu-bundle: $1" >&2; exit "${2:-1}"; }

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null) ||
  die "not inside the repository's git checkout"
cd "$root"
for a in "$@"; do
  case "$a" in
    -h | --help)
      sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*) die "unknown flag '$a' (usage: ./dev task gpu-bundle [ENTRY.ts ...])" 2 ;;
    *) [ -f "$a" ] || die "no such entry file: $a" 2 ;;
  esac
done
for tool in xz tar apt-get; do
  command -v "$tool" >/dev/null || die "needs '$tool' on PATH"
done

out=.gpu
mkdir -p "$out/debs"

# 1. deno: the binary ./dev runs (installing the pinned version first if needed).
deno_bin=$(./dev eval 'console.log(Deno.execPath())' 2>/dev/null) || die "./dev could not run deno"
deno_bin=$(readlink -f "$deno_bin")
version=$("$deno_bin" --version | head -1)
if [ ! -f "$out/deno.xz" ] || [ ! -f "$out/deno.version" ] || [ "$(cat "$out/deno.version")" != "$version" ]; then
  echo "gpu-bundle: packing $version -> $out/deno.xz" >&2
  xz -T0 -6 -c "$deno_bin" >"$out/deno.xz.tmp" && mv "$out/deno.xz.tmp" "$out/deno.xz"
  echo "$version" >"$out/deno.version"
fi

# 2. Debian's Vulkan loader and GL dispatch libraries (amd64), downloaded once.
if ! ls "$out"/debs/libvulkan1_*.deb "$out"/debs/libglvnd0_*.deb >/dev/null 2>&1; then
  echo "gpu-bundle: downloading the Vulkan loader and libglvnd (.deb)" >&2
  apt_tmp=$(mktemp -d)
  trap 'rm -rf "$apt_tmp"' EXIT
  mkdir -p "$apt_tmp/lists/partial" "$apt_tmp/cache/archives/partial"
  apt_o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDebug::NoLocking=1
    "-oDir::State::Lists=$apt_tmp/lists" "-oDir::Cache=$apt_tmp/cache")
  apt-get "${apt_o[@]}" update >"$apt_tmp/update.log" 2>&1 ||
    { cat "$apt_tmp/update.log" >&2; die "apt-get update failed"; }
  (cd "$out/debs" && apt-get "${apt_o[@]}" download \
    libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >"$apt_tmp/download.log" 2>&1) ||
    { cat "$apt_tmp/download.log" >&2; die "apt-get download failed"; }
fi

# 3. The npm packages: every entry point's imports, and Dawn's package by name (a dynamic import
#    of a constant, which `deno cache` of the entry points does not follow).
if [ $# -eq 0 ]; then
  set -- mod.ts $(find bench scripts -name '*.ts' | sort)
fi
dawn=$(sed -n 's/^export const DAWN_PACKAGE = "\(npm:[^"]*\)".*/\1/p' gpu/engine.ts)
[ -n "$dawn" ] || die "DAWN_PACKAGE not found in gpu/engine.ts"
dir="$out/deno_dir"
rm -rf "$dir"
dawn_entry="$out/dawn_entry.ts"
echo "import \"$dawn\";" >"$dawn_entry"
echo "gpu-bundle: caching the npm packages of $# entry files and $dawn" >&2
DENO_DIR="$root/$dir" "$deno_bin" cache --quiet --frozen "$@" "$dawn_entry" || die "deno cache failed"
rm -f "$dawn_entry"
dawn_name=${dawn#npm:}
dawn_dist=$(ls -d "$dir"/npm/*/"${dawn_name%@*}/${dawn_name##*@}"/dist 2>/dev/null | head -1)
[ -n "$dawn_dist" ] && [ -d "$dawn_dist/linux-x64" ] || die "Dawn's linux-x64 build is not in the cache"
# npm:webgpu ships builds for five platforms; the GPU host needs linux-x64 only.
find "$dawn_dist" -mindepth 1 -maxdepth 1 -type d ! -name linux-x64 -exec rm -rf {} +
# Source maps, type declarations and docs are never loaded at run time.
find "$dir/npm" -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.md' \) -delete
tar -cJf "$out/deno_dir.tar.xz.tmp" -C "$out" deno_dir && mv "$out/deno_dir.tar.xz.tmp" "$out/deno_dir.tar.xz"
rm -rf "$dir"

# 4. The host's setup.
cat >"$out/setup.sh" <<'SETUP'
# Source on the GPU host from the repository root (as root, for the libraries):
#   source .gpu/setup.sh; ./dev task table3
# Installs Debian's Vulkan loader and libglvnd, puts the bundled deno first on PATH (./dev runs a
# deno of its pinned version found there) and points DENO_DIR at the bundled npm cache.
_gpu_setup() {
  local g="$PWD/.gpu" f
  [ -f "$g/deno.xz" ] || { echo "setup.sh: run it from the repository root (no .gpu/deno.xz here)" >&2; return 1; }
  for f in "$g"/debs/*.deb; do dpkg -x "$f" / || return 1; done
  ldconfig 2>/dev/null || true
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  mkdir -p "$g/bin"
  if [ ! -x "$g/bin/deno" ]; then
    xz -dc "$g/deno.xz" >"$g/bin/deno.tmp" && chmod +x "$g/bin/deno.tmp" && mv "$g/bin/deno.tmp" "$g/bin/deno" || return 1
  fi
  [ -d "$g/deno_dir" ] || tar -xJf "$g/deno_dir.tar.xz" -C "$g" || return 1
  case ":$PATH:" in *":$g/bin:"*) ;; *) export PATH="$g/bin:$PATH" ;; esac
  export DENO_DIR="$g/deno_dir" DENO_NO_UPDATE_CHECK=1
  echo "setup.sh: $(deno --version | head -1), DENO_DIR=$DENO_DIR" >&2
}
_gpu_setup
SETUP

size=$(du -sh "$out" | cut -f1)
echo "gpu-bundle: $size in $out/ — carry it with the working tree; on the host: source .gpu/setup.sh; ./dev task table3" >&2
