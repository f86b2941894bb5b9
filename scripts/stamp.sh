# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/install-test-deps.sh: `stamp WHAT` prints one line with the
# time of day (UTC) and the seconds since the script began, so that a log shows where a run spends
# its time.
stamp_start=${stamp_start:-$(date +%s)}
export stamp_start
stamp() { printf '%s [%s +%ss] %s\n' "$(basename "$0")" "$(date -u +%T)" $(($(date +%s) - stamp_start)) "$*"; }
