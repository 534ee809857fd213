#!/usr/bin/env bash
# Builds keras_archive_fuzz and safetensors_fuzz with clang's libFuzzer against the libraries of a
# GCC release tree (cmake --preset release; build the lockstep_keras target), for as long as the
# keras layer does not compile with clang (src/keras/layers/preprocessing.cpp puts target_clones on
# function templates, which clang refuses), so that -DLOCKSTEP_BUILD_FUZZ=ON cannot build them.
# The sources under test are compiled here with the fuzzer's instrumentation; the rest of the
# library (uninstrumented) comes from the release tree.
#   fuzz/build_keras_fuzzers.sh [BUILD=build/release] [OUT=build/fuzz-keras]
#   build/fuzz-keras/keras_archive_fuzz -max_total_time=60 fuzz/corpus/keras
#   build/fuzz-keras/safetensors_fuzz -max_total_time=60 fuzz/corpus/safetensors
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build/release}
out=${2:-$src/build/fuzz-keras}
mkdir -p "$out"
s=$src/src/keras/saving
libs=()
for layer in keras distribute data autodiff ops core; do libs+=("$build/src/liblockstep_$layer.a"); done
deps=(-ldnnl -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi_cxx -lmpi -lgomp
      -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5 -lzip -lz -lonnx_proto -lprotobuf -lpthread)
flags=(-std=c++20 -fsanitize=fuzzer,address,undefined -g -O1 -I"$src/include" -I"$s"
       -isystem /usr/include/hdf5/serial)
clang++ "${flags[@]}" "$src/fuzz/keras_archive_fuzz.cpp" "$s/zip_archive.cpp" "$s/h5_store.cpp" \
  "$s/saving_lib.cpp" "$s/model_config.cpp" "$s/serialization_lib.cpp" \
  "$s/object_registration.cpp" "$s/builtin_layers.cpp" "$s/builtin_objects.cpp" \
  "${libs[@]}" "${deps[@]}" -o "$out/keras_archive_fuzz"
clang++ "${flags[@]}" "$src/fuzz/safetensors_fuzz.cpp" "$s/safetensors.cpp" "${libs[@]}" \
  "${deps[@]}" -o "$out/safetensors_fuzz"
