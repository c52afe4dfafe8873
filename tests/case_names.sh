#!/bin/sh
# ctest registers one test per doctest TEST_CASE by name, and CMake splits a name at ';' into two
# tests that each match no case and pass having run nothing. Fails naming any case with a ';'.
# Usage: case_names.sh TEST_BINARY...
status=0
for binary in "$@"; do
  "$binary" --list-test-cases --no-version | grep ';' | while IFS= read -r name; do
    echo "$(basename "$binary"): test case name with ';' (ctest would run none of it): $name"
  done | grep . && status=1
done
exit $status
