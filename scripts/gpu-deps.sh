#!/usr/bin/env bash
# Prepares, on a machine with Debian's package mirror, the build dependencies
# that a bare GPU machine may lack (HDF5, spdlog/fmt, CLI11, nlohmann-json,
# zstd, Oniguruma, GoogleTest, cpp-httplib, pkg-config, and the libraries
# libhdf5 loads),
# unpacked with `dpkg -x` into a private prefix, nothing installed:
#
#   scripts/gpu-deps.sh [DIR]      default .gpu-deps (ignored by git)
#
# scripts/gpu-check.sh uses DIR/root when it exists. The prefix must stay small
# enough to travel with a working tree (64 MiB): HDF5's static archives,
# documentation and manuals are left out. Debian 12 binaries
# need glibc 2.36 or newer on the GPU machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu-deps}
packages=(
  libhdf5-dev libhdf5-103-1 libsz2 libaec0
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
  libzstd-dev libzstd1 libonig-dev libonig5 libgtest-dev libcpp-httplib-dev libcpp-httplib0.11
  pkgconf pkgconf-bin libpkgconf3
  # what libhdf5 (built with the ROS3 driver) loads: libcurl and its closure
  libcurl4 libbrotli1 libcom-err2 libdb5.3 libffi8 libgmp10 libgnutls30 libgssapi-krb5-2 libhogweed6 libidn2-0
  libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 libnettle8 libnghttp2-14 libp11-kit0 libpsl5
  librtmp1 libsasl2-2 libssh2-1 libssl3 libtasn1-6 libunistring2 zlib1g
)
mkdir -p "$dir/debs"
(cd "$dir/debs" && apt-get download "${packages[@]}" >/dev/null)
rm -rf "$dir/root"
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
# Keep headers, libraries, CMake and pkg-config files; drop HDF5's static archives.
find "$dir/root" -name 'libhdf5*.a' -delete  # most of the size; no CMake file refers to them
rm -rf "$dir/root/usr/share/doc" "$dir/root/usr/share/man" "$dir/root/usr/share/lintian" "$dir/debs"
size=$(du -sm "$dir" | cut -f1)
echo "gpu-deps: ${#packages[@]} packages unpacked into $dir/root (${size} MiB)"
[ "$size" -le 60 ] || { echo "gpu-deps: larger than 60 MiB; it would not travel" >&2; exit 1; }
