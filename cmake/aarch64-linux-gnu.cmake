# Cross-compiling Lockstep for aarch64 (ARM64) Linux on a Debian 12 x86-64 machine, with Debian's
# cross toolchain (g++-aarch64-linux-gnu) and arm64 libraries: scripts/setup-arm64 installs them,
# the `cross-arm64` preset uses this file (docs/packaging.md).
#
# Where the libraries are:
#   * multiarch (dpkg --add-architecture arm64): /usr/lib/aarch64-linux-gnu and
#     /usr/include/aarch64-linux-gnu, which Debian's cross compiler searches by itself;
#   * the sysroot folder (LOCKSTEP_ARM64_SYSROOT, default ~/.cache/lockstep/arm64-sysroot) for the
#     packages whose arm64 build cannot be installed beside the amd64 one: oneDNN's, HDF5's, ONNX's
#     and Open MPI's development files, with their libraries.
# No CMAKE_SYSROOT: the multiarch libraries live under /, beside the host's, in directories of
# their own. Programs (protoc) are the build machine's: protobuf-compiler must have the version of
# the arm64 libprotobuf-dev, which Debian's multiarch guarantees.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(DEFINED ENV{LOCKSTEP_ARM64_SYSROOT})
  set(LOCKSTEP_ARM64_SYSROOT "$ENV{LOCKSTEP_ARM64_SYSROOT}")
else()
  set(LOCKSTEP_ARM64_SYSROOT "$ENV{HOME}/.cache/lockstep/arm64-sysroot")
endif()
if(NOT EXISTS "${LOCKSTEP_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/cmake/dnnl/dnnl-config.cmake")
  message(FATAL_ERROR "No arm64 sysroot at ${LOCKSTEP_ARM64_SYSROOT} (LOCKSTEP_ARM64_SYSROOT): run "
                      "scripts/setup-arm64 to install the cross toolchain and unpack it.")
endif()
set(_lib "${LOCKSTEP_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")

# Config packages (dnnl, ONNX) from the sysroot first; nothing from the host's x86-64 directories
# (CMAKE_LIBRARY_ARCHITECTURE keeps find_library and find_package in the aarch64 ones).
list(PREPEND CMAKE_PREFIX_PATH "${LOCKSTEP_ARM64_SYSROOT}/usr")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# pkg-config (libzip, hdf5) reads arm64 .pc files only; scripts/setup-arm64 pointed the sysroot's
# into the sysroot.
set(ENV{PKG_CONFIG_LIBDIR}
    "${_lib}/pkgconfig:/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Open MPI without its compiler wrapper (the host's mpicxx would describe the x86-64 build).
set(MPI_SKIP_COMPILER_WRAPPER ON)
set(MPI_CXX_HEADER_DIR "${_lib}/openmpi/include")
set(MPI_CXX_LIB_NAMES "mpi_cxx;mpi")
set(MPI_mpi_cxx_LIBRARY "${_lib}/libmpi_cxx.so")
set(MPI_mpi_LIBRARY "${_lib}/openmpi/lib/libmpi.so")

# The sysroot's libraries (libmpi's own dependencies among them) resolve at link time through
# -rpath-link and at run time through an RPATH (not RUNPATH, which would not reach libmpi's
# dependencies), so the binaries run under qemu-aarch64-static without LD_LIBRARY_PATH. They run on
# the multiarch libc6:arm64 (QEMU finds /lib/ld-linux-aarch64.so.1): the cross compiler's own libc
# under /usr/aarch64-linux-gnu (qemu's -L) hangs in its first pthread_create under QEMU 7.2.
foreach(_kind EXE SHARED MODULE)
  set(CMAKE_${_kind}_LINKER_FLAGS_INIT
      "-Wl,-rpath-link,${_lib} -Wl,--disable-new-dtags -Wl,-rpath,${_lib}")
endforeach()
