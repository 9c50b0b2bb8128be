#!/usr/bin/env bash
# The GUI-less build (-DDLION_BUILD_GUI=OFF), configured and built
# incrementally in BUILD_DIR next to the main tree (ccache makes most objects
# cache hits), then checked: no dlion-studio, dlion and dlion-agent run and
# need neither Qt Widgets, Qt PrintSupport nor Qt Svg, dlion says plainly
# that report and compare are not in this build, and every program answers
# --help and --version (tst_command_line). Prints how long the build took.
# Usage: build_without_gui.sh SOURCE_DIR BUILD_DIR [cmake -D options of the main tree]
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUILD=$2
shift 2
fail() { echo "FAIL: $*" >&2; exit 1; }
# Relative paths in ccache's keys: a tree as deep as the main one hits its
# objects when both were built under the same CCACHE_BASEDIR (.ci/run sets it).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$SRC")} CCACHE_NOHASHDIR=1

start=$(date +%s)
mkdir -p "$BUILD"
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" -DDLION_BUILD_GUI=OFF >"$BUILD/configure.log" 2>&1 \
  || { cat "$BUILD/configure.log"; fail "configure"; }
# The programs and the command-line test; the other tests' targets are
# configured (their CMake must hold without the GUI) but not linked, which
# would cost minutes of LibTorch links for code the main tree tests.
cmake --build "$BUILD" --parallel "${DLION_BUILD_JOBS:-$(nproc)}" --target dlion dlion-agent tst_command_line || fail "build"
echo "GUI-less tree configured and built in $(( $(date +%s) - start )) s"

[[ ! -e "$BUILD/bin/dlion-studio" ]] || fail "a GUI-less build made dlion-studio"
for program in dlion dlion-agent; do
  "$BUILD/bin/$program" --version >/dev/null || fail "$program --version"
  needed=$(readelf -d "$BUILD/bin/$program" | grep NEEDED || true)
  if grep -E 'libQt6(Widgets|PrintSupport|Svg)' <<<"$needed"; then
    fail "$program needs GUI libraries in a GUI-less build"
  fi
done
set +e
said=$("$BUILD/bin/dlion" report last 2>&1)
code=$?
set -e
[[ $code -eq 2 ]] || fail "dlion report exited $code, expected 2: $said"
grep -q 'DLION_BUILD_GUI' <<<"$said" || fail "dlion report does not say why it is missing: $said"
help=$("$BUILD/bin/dlion" --help)
! grep -qE '^ +(report|compare) ' <<<"$help" || fail "dlion --help lists report or compare in a GUI-less build"
DLION_CLI="$BUILD/bin/dlion" DLION_AGENT="$BUILD/bin/dlion-agent" "$BUILD/bin/tst_command_line" || fail "tst_command_line"
echo "ok"
