#!/usr/bin/env bash
# Installs the build in BUILD_DIR into a staging directory (DESTDIR) and builds and runs the
# three consumer projects against it: CMake (find_package), Meson through pkg-config, and
# Meson with strata as a subproject (of the source tree itself).
#   usage: tests/consumers/run_consumers.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/stage
meson install -C "$build" --destdir "$stage" --quiet
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
libdir=$(meson introspect "$build" --buildoptions | python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
[[ $libdir == /* ]] || libdir=$prefix/$libdir
echo "consumers: installed to DESTDIR $stage (prefix $prefix): $(find "$stage" -type f | wc -l) files"
ls "$stage$prefix/include/strata/strategy/mirrored.hpp" "$stage$libdir/pkgconfig/strata.pc" \
   "$stage$libdir/cmake/strata/strataConfig.cmake" >/dev/null

# The three build side by side (each one compile, mostly; the cores are shared), then each
# consumer runs, in order.
names=() pids=()
build() {  # name, then the command that builds it
  names+=("$1")
  "${@:2}" >"$work/$1.log" 2>&1 &
  pids+=($!)
}
build cmake sh -c "cmake -S '$root/tests/consumers/cmake' -B '$work/cmake' -DCMAKE_PREFIX_PATH='$stage$prefix' \
  && cmake --build '$work/cmake'"
# The .pc files are relocatable (pkgconfig.relocatable): found where they lie, staged or not.
build meson_pkgconfig env PKG_CONFIG_PATH="$stage$libdir/pkgconfig" \
  sh -c "meson setup '$work/meson_pkgconfig' '$root/tests/consumers/meson_pkgconfig' && ninja -C '$work/meson_pkgconfig'"
mkdir -p "$work/sub/subprojects"
cp "$root/tests/consumers/meson_subproject/meson.build" "$root/tests/consumers/consumer.cpp" "$work/sub/"
sed -i "s|'../consumer.cpp'|'consumer.cpp'|" "$work/sub/meson.build"
ln -s "$root" "$work/sub/subprojects/strata"
build meson_subproject sh -c "meson setup '$work/meson_subproject' '$work/sub' --wrap-mode=nodownload \
  && ninja -C '$work/meson_subproject'"
for i in "${!names[@]}"; do
  name=${names[$i]}
  echo "consumers: $name"
  wait "${pids[$i]}" || { cat "$work/$name.log"; echo "consumers: FAILED to build $name"; exit 1; }
  "$work/$name/consumer" || { echo "consumers: FAILED to run $name"; exit 1; }
done
echo "consumers: PASS (cmake, meson via pkg-config, meson subproject)"
