#!/usr/bin/env bash
# Builds the Debian package from a built tree, checks what it holds and runs
# the programs from the extracted package (never installs it on this machine).
# Usage: package_deb.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --build "$BUILD" --target man_pages >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; fail "man pages"; }
(cd "$BUILD" && cpack -G DEB -B "$TMP/pkg" >"$TMP/cpack.log" 2>&1) || { cat "$TMP/cpack.log"; fail "cpack"; }
DEB=$(ls "$TMP"/pkg/*.deb)
echo "package: $(basename "$DEB") ($(stat -c %s "$DEB") bytes)"

INFO=$(dpkg-deb --info "$DEB")
DEPENDS=$(sed -n 's/^ Depends: //p' <<<"$INFO")
echo "Depends: $DEPENDS"
for dep in libc6 libstdc++6 libqt6core6 libqt6network6 libqt6widgets6 libqt6sql6-sqlite libtorch1.13 libssh; do
  grep -q "$dep" <<<"$DEPENDS" || fail "Depends lacks $dep"
done
grep -q '^ Recommends: .*dataset-fashion-mnist' <<<"$INFO" || fail "Recommends lacks dataset-fashion-mnist"

CONTENTS=$(dpkg-deb --contents "$DEB" | awk '{print $NF}')
for f in ./usr/bin/dlion ./usr/bin/dlion-agent ./usr/bin/dlion-studio \
         ./usr/share/applications/dlion-studio.desktop \
         ./usr/share/icons/hicolor/scalable/apps/dlion-studio.svg \
         ./usr/share/man/man1/dlion.1 ./usr/share/man/man1/dlion-agent.1 ./usr/share/man/man1/dlion-studio.1 \
         ./usr/share/man/man1/dlion-run.1 ./usr/share/man/man1/dlion-report.1; do
  grep -qx "$f" <<<"$CONTENTS" || fail "package lacks $f"
done

ROOT="$TMP/root"
dpkg-deb -x "$DEB" "$ROOT"
for page in "$ROOT"/usr/share/man/man1/*.1; do
  grep -qx '.SH EXIT STATUS' "$page" || fail "$(basename "$page") lacks EXIT STATUS"
done
desktop-file-validate "$ROOT/usr/share/applications/dlion-studio.desktop" || fail "invalid .desktop file"
for prog in dlion dlion-agent dlion-studio; do
  bin="$ROOT/usr/bin/$prog"
  if readelf -d "$bin" | grep -E 'R(UN)?PATH' | grep -q "$BUILD"; then fail "$prog has an RPATH into the build tree"; fi
  if env -u LD_LIBRARY_PATH ldd "$bin" | grep -q 'not found'; then fail "$prog has unresolved libraries"; fi
done

# Run from the extracted tree: no library path, no agent override, build dir off PATH.
run() { env -u LD_LIBRARY_PATH -u DLION_AGENT -u DLION_CLI PATH=/usr/bin:/bin QT_QPA_PLATFORM=offscreen "$@"; }
VERSION=$(run "$ROOT/usr/bin/dlion" --version)
[ "$VERSION" = "dlion $(run "$ROOT/usr/bin/dlion-agent" --version | sed 's/^dlion-agent //')" ] || fail "versions differ"
[[ "$VERSION" =~ ^dlion\ [0-9]+\.[0-9]+\.[0-9]+ ]] || fail "dlion --version said \"$VERSION\""
STUDIO=$(run "$ROOT/usr/bin/dlion-studio" --version)
[[ "$STUDIO" == "dlion-studio "* ]] || fail "dlion-studio --version said \"$STUDIO\""
echo "$VERSION / $STUDIO"

# A tiny real run: embedded local cluster of the packaged dlion-agent.
rc=0
run "$ROOT/usr/bin/dlion" run --workers 2 --seconds 3 --out "$TMP/run" --store "$TMP/runs.sqlite" --quiet \
  >"$TMP/run.log" 2>&1 || rc=$?
cat "$TMP/run.log"
[ "$rc" -eq 0 ] || fail "dlion run exited $rc"
[ -s "$TMP/run/summary.json" ] || fail "no summary.json"
grep -q '"final_accuracy"' "$TMP/run/summary.json" || fail "summary.json lacks final_accuracy"
echo "PASS"
