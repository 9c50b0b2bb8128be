#!/usr/bin/env bash
# Writes a section-1 manual page from a program's man-style --help.
# Usage: man_page.sh PROGRAM "COMMAND" PAGE VERSION OUT
# Headings (NAME, SYNOPSIS, ...) become .SH; the rest keeps its layout (.nf)
# less the indent man adds itself.
set -eo pipefail
printf '.TH %s 1 "" "%s" "DLion Studio"\n' "$3" "$4" > "$5.tmp"
# shellcheck disable=SC2086 # COMMAND is empty or one word
QT_QPA_PLATFORM=offscreen "$1" $2 --help | sed \
  -e 's/^    //' \
  -e 's/\\/\\e/g' \
  -e "s/^\([.']\)/\\\\\&\1/" \
  -e 's/^\([A-Z][A-Z ]*\)$/.SH \1\n.nf/' >> "$5.tmp"
mv "$5.tmp" "$5"
