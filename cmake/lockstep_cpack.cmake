# `cpack -G DEB` (or `cpack --preset deb` after `cmake --preset package && cmake --build --preset
# package`): one Debian package, lockstep_<version>_<arch>.deb, holding everything `cmake --install`
# installs. Install it with `apt-get install ./lockstep_*.deb`, which pulls in its Depends.
set(CPACK_PACKAGE_NAME lockstep)
set(CPACK_PACKAGE_VENDOR "Lockstep")
set(CPACK_PACKAGE_CONTACT "Lockstep developers <lockstep@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION
    "A C++20 library and command-line tool for synchronous data-parallel training with a Keras-like \
API: a model is trained on every core of a machine, and across machines over MPI, each replica on \
its shard of the global batch, with gradients summed across replicas. Includes the headers, the \
CMake package (find_package(Lockstep)), lockstep.pc and the `lockstep` tool.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# Depends: the runtime packages of what the binaries link (oneDNN, Open MPI, OpenMP, zlib,
# protobuf, libpng, libjpeg-turbo, libstdc++), found by dpkg-shlibdeps; plus what building
# against the package needs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR}/src)
# The public headers include <nlohmann/json_fwd.hpp>.
set(_depends nlohmann-json3-dev)
if(NOT BUILD_SHARED_LIBS)
  # A static liblockstep leaves oneDNN, MPI, OpenMP, zlib, libzip, HDF5, ONNX, protobuf, libpng and
  # libjpeg to the program's link (and oneDNN's CMake package needs OpenCL's): their development
  # packages are needed to use it.
  list(APPEND _depends libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev zlib1g-dev libzip-dev
       libhdf5-dev libonnx-dev libprotobuf-dev libpng-dev libjpeg62-turbo-dev)
endif()
list(JOIN _depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
# `lockstep train` reads Fashion-MNIST by default; multi-worker jobs are started with mpirun.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, openmpi-bin")
include(CPack)
