#!/usr/bin/env bash
# Configures and builds DLion Studio into build/ (Ninja, ccache when present).
# Usage: installer/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build build --parallel "$(nproc)"
