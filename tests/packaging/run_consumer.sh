#!/usr/bin/env bash
# Builds examples/consumer, a project outside the tree, against Lockstep as a user gets it, and runs
# it (it exits non-zero unless the seed model learned). One mode per CTest test:
#
#   run_consumer.sh static     SRC BUILD WORK   install BUILD (static liblockstep) into a staging
#                                               prefix; the consumer finds it with find_package
#   pkg-config                 SRC BUILD WORK   the same install; the consumer is compiled with
#                                               `pkg-config --cflags --libs lockstep` alone
#   shared                     SRC BUILD WORK   configure SRC anew with BUILD_SHARED_LIBS=ON, build
#                                               and install it; check the SONAME; the consumer with
#                                               find_package and with pkg-config; the installed tool
#   fetch-content              SRC BUILD WORK   the consumer builds Lockstep from SRC (FetchContent)
#
# BUILD is the CTest build tree (its compiler, build type and generator are reused, so that with
# ccache the second build of the library is served from the first). WORK is emptied first and
# removed when the test passes.
set -euo pipefail
mode=$1 src=$2 build=$3 work=$4
consumer_src=$src/examples/consumer

cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
generator=$(cache_value CMAKE_GENERATOR)
cxx=$(cache_value CMAKE_CXX_COMPILER)
build_type=$(cache_value CMAKE_BUILD_TYPE)
launcher=$(cache_value CMAKE_CXX_COMPILER_LAUNCHER)
common=(-G "$generator" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type")
if [[ -n $launcher ]]; then common+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"); fi

fail() { echo "run_consumer.sh ($mode): $*" >&2; exit 1; }
step() { echo "== $*"; }

rm -rf "$work"
mkdir -p "$work"

# The installed headers are the public surface: every one reachable from lockstep/lockstep.h, none
# including an implementation header (MPI, oneDNN, OpenMP, zlib, or anything outside lockstep/).
check_installed_headers() {
  local inc=$1/include
  [[ -f $inc/lockstep/lockstep.h ]] || fail "no $inc/lockstep/lockstep.h"
  local bad
  bad=$({
    grep -rnE '#include[[:space:]]*<(mpi\.h|omp\.h|zlib\.h|oneapi/|dnnl)' "$inc"
    grep -rnE '#include[[:space:]]*"' "$inc" | grep -vE '#include[[:space:]]*"lockstep/'
  } || true)
  [[ -z $bad ]] || fail "installed headers include implementation headers:"$'\n'"$bad"
  local -A seen=()
  local queue=(lockstep/lockstep.h) h dep
  while ((${#queue[@]})); do
    h=${queue[0]} queue=("${queue[@]:1}")
    [[ -n ${seen[$h]:-} ]] && continue
    seen[$h]=1
    [[ -f $inc/$h ]] || fail "installed header includes $h, which is not installed"
    for dep in $(sed -n 's/^#include "\(lockstep\/[^"]*\)".*/\1/p' "$inc/$h"); do queue+=("$dep"); done
  done
  local f unreachable=()
  while IFS= read -r f; do
    [[ -n ${seen[${f#"$inc"/}]:-} ]] || unreachable+=("${f#"$inc"/}")
  done < <(find "$inc" -type f)
  ((${#unreachable[@]} == 0)) ||
    fail "installed headers not reachable from lockstep/lockstep.h (public? then include them there; internal? move them under src/): ${unreachable[*]}"
  echo "installed headers: ${#seen[@]}, all reachable from lockstep/lockstep.h, no implementation headers"
}

# find_package(Lockstep) from the staging prefix only, then run.
consumer_cmake() {
  local prefix=$1 dir=$2
  step "configure and build examples/consumer against $prefix"
  cmake -S "$consumer_src" -B "$dir" "${common[@]}" -DCMAKE_PREFIX_PATH="$prefix" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "configuring the consumer failed"; }
  local found
  found=$(sed -n 's/^Lockstep_DIR:PATH=//p' "$dir/CMakeCache.txt")
  [[ $found == "$prefix"/* ]] || fail "find_package(Lockstep) found $found, expected one under $prefix"
  cmake --build "$dir" --parallel 2
  step "run the consumer"
  "$dir/consumer"
}

# The consumer compiled and linked with pkg-config's flags and nothing else.
consumer_pkg_config() {
  local prefix=$1 dir=$2
  mkdir -p "$dir"
  local pc_dir
  pc_dir=$(dirname "$(find "$prefix" -name lockstep.pc -print -quit)")
  [[ -f $pc_dir/lockstep.pc ]] || fail "no lockstep.pc under $prefix"
  local flags
  flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs lockstep) || fail "pkg-config failed"
  step "c++ -std=c++20 main.cpp $flags"
  # shellcheck disable=SC2086  # the flags are words
  "$cxx" -std=c++20 -O2 "$consumer_src/main.cpp" -o "$dir/consumer" $flags
  step "run the consumer (pkg-config build)"
  LD_LIBRARY_PATH=$(PKG_CONFIG_PATH=$pc_dir pkg-config --variable=libdir lockstep) "$dir/consumer"
}

case $mode in
  static | pkg-config)
    step "cmake --install $build --prefix $work/prefix"
    cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
    [[ -n $(find "$work/prefix" -name liblockstep.a) ]] || fail "no liblockstep.a installed"
    [[ -z $(find "$work/prefix" -name 'liblockstep.so*') ]] || fail "a static build installed liblockstep.so"
    if [[ $mode == static ]]; then
      check_installed_headers "$work/prefix"
      consumer_cmake "$work/prefix" "$work/consumer"
    else
      consumer_pkg_config "$work/prefix" "$work/consumer"
    fi
    ;;
  shared)
    step "configure Lockstep with BUILD_SHARED_LIBS=ON"
    cmake -S "$src" -B "$work/lockstep" "${common[@]}" -DBUILD_SHARED_LIBS=ON \
      -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF \
      >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure failed"; }
    step "build liblockstep.so and the lockstep tool"
    cmake --build "$work/lockstep" --parallel 2 >"$work/build.log" 2>&1 ||
      { tail -50 "$work/build.log"; fail "build failed"; }
    cmake --install "$work/lockstep" --prefix "$work/prefix" >"$work/install.log"
    lib=$(find "$work/prefix" -name 'liblockstep.so.*.*.*' -print -quit)
    [[ -n $lib ]] || fail "no versioned liblockstep.so.X.Y.Z installed"
    soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
    version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$work/lockstep/CMakeCache.txt")
    IFS=. read -r major minor _ <<<"$version"
    expected=liblockstep.so.$major
    ((major == 0)) && expected=liblockstep.so.$major.$minor
    [[ $soname == "$expected" ]] || fail "SONAME is '$soname', expected $expected"
    [[ -L $(dirname "$lib")/$soname && -L $(dirname "$lib")/liblockstep.so ]] ||
      fail "missing $soname or liblockstep.so symlink beside $lib"
    [[ -z $(find "$work/prefix" -name liblockstep.a) ]] || fail "a shared build installed liblockstep.a"
    echo "installed $lib, SONAME $soname"
    step "the installed tool finds the installed library"
    "$work/prefix/bin/lockstep" devices
    loaded=$(ldd "$work/prefix/bin/lockstep" | awk -v so="$soname" '$1 == so {print $3}')
    [[ -n $loaded && $(realpath "$loaded") == $(realpath "$lib") ]] ||
      fail "the installed lockstep tool loads '$loaded', expected $lib"
    consumer_cmake "$work/prefix" "$work/consumer"
    objdump -p "$work/consumer/consumer" | grep -q "NEEDED *$soname" ||
      fail "the consumer does not link $soname"
    consumer_pkg_config "$work/prefix" "$work/consumer-pc"
    ;;
  fetch-content)
    step "configure examples/consumer with FetchContent(SOURCE_DIR $src)"
    cmake -S "$consumer_src" -B "$work/consumer" "${common[@]}" -DLOCKSTEP_SOURCE_DIR="$src" \
      >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure failed"; }
    cmake --build "$work/consumer" --parallel 2 >"$work/build.log" 2>&1 ||
      { tail -50 "$work/build.log"; fail "build failed"; }
    step "run the consumer"
    "$work/consumer/consumer"
    ;;
  *) fail "unknown mode" ;;
esac
rm -rf "$work"
echo "run_consumer.sh ($mode): passed"
