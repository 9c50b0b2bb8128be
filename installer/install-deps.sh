#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the main job need.
# Idempotent: apt-get skips what is already installed; safe to run twice.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # Qt 6
  qt6-base-dev qt6-base-dev-tools libqt6sql6-sqlite qt6-svg-dev libgl-dev
  # training engine
  libtorch-dev libgloo-dev zlib1g-dev
  # an optimised BLAS for LibTorch's linear layers, taken by Debian's
  # libblas.so.3 alternative; LeNet-5 trains 1.45x faster than on the
  # reference BLAS. The pthread build, because the serial one has no locks
  # and gives wrong products when two threads of a process call it at once;
  # workers limit it to one thread (they share the cores)
  libopenblas0-pthread
  # job and cluster files in YAML
  libyaml-cpp-dev
  # GUI plots, SSH deployment
  libqcustomplot-dev libssh-dev libssl-dev
  # data
  dataset-fashion-mnist
  # peer benchmarks (PyTorch reference runs)
  python3 python3-torch
  # reports: a font for text drawn offscreen (HTML/PDF plots)
  fonts-dejavu-core
  # tests: real sshd, network namespaces, headless display, PDF rendering
  openssh-server openssh-client iproute2 xvfb xauth poppler-utils procps
  # packaging: cpack's DEB generator (dpkg-shlibdeps, file) and its test
  dpkg-dev file binutils desktop-file-utils
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
