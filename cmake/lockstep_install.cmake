# `cmake --install`: the public headers, liblockstep, the CMake package (find_package(Lockstep)
# -> Lockstep::lockstep) and lockstep.pc for pkg-config (docs/packaging.md). The `lockstep` tool
# is installed by apps/. Everything is relocatable: a staged install (--prefix, DESTDIR) works
# where it lands.
include(CMakePackageConfigHelpers)

set(LOCKSTEP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Lockstep)

install(TARGETS lockstep EXPORT LockstepTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
# The public surface is include/lockstep; implementation headers (MPI's, oneDNN's, helpers shared
# between sources) live beside the sources under src/ and are never installed.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/lockstep DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(EXPORT LockstepTargets NAMESPACE Lockstep:: FILE LockstepTargets.cmake
        DESTINATION ${LOCKSTEP_CMAKE_DIR} COMPONENT dev)

# LockstepConfig.cmake finds what Lockstep::lockstep's link interface names: always
# nlohmann_json (public headers use nlohmann::json) and Threads; for a static liblockstep also
# oneDNN, MPI, OpenMP, zlib, libzip and HDF5, which then reach the user's final link.
if(BUILD_SHARED_LIBS)
  set(LOCKSTEP_SHARED_LIBS ON)
else()
  set(LOCKSTEP_SHARED_LIBS OFF)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/LockstepConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/LockstepConfig.cmake
                              INSTALL_DESTINATION ${LOCKSTEP_CMAKE_DIR})
# 0.x: any minor release may break the API, so only the same minor version satisfies a request.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_compatibility SameMinorVersion)
else()
  set(_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/LockstepConfigVersion.cmake
                                 COMPATIBILITY ${_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/LockstepConfig.cmake
              ${PROJECT_BINARY_DIR}/LockstepConfigVersion.cmake
        DESTINATION ${LOCKSTEP_CMAKE_DIR} COMPONENT dev)

# ---- lockstep.pc -------------------------------------------------------------------------------
# A library given as a full path becomes -L<dir> -l<name> (no -L for the linker's own directories).
function(lockstep_pc_link_flags out)
  set(_flags)
  foreach(lib ${ARGN})
    if(lib MATCHES "^/.*/lib([^/]+)\\.(so|a)(\\..*)?$")
      get_filename_component(_dir ${lib} DIRECTORY)
      if(NOT _dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND _flags "-L${_dir}")
      endif()
      list(APPEND _flags "-l${CMAKE_MATCH_1}")
    else()
      list(APPEND _flags "${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _flags)
  list(JOIN _flags " " _flags)
  set(${out} "${_flags}" PARENT_SCOPE)
endfunction()

# What a program linking a static liblockstep needs besides it. oneDNN, zlib, protobuf,
# libpng and libjpeg are in the linker's default directories on Debian; Open MPI's are not.
lockstep_pc_link_flags(_mpi_libs ${MPI_CXX_LIBRARIES})
lockstep_pc_link_flags(_hdf5_libs ${HDF5_LINK_LIBRARIES})
set(LOCKSTEP_PC_DEPENDENCY_LIBS
    "-ldnnl ${_mpi_libs} ${OpenMP_CXX_FLAGS} -lz -lzip ${_hdf5_libs} -lonnx_proto -lprotobuf -lpng16 -ljpeg -pthread")
if(BUILD_SHARED_LIBS)
  set(LOCKSTEP_PC_LIBS "-L\${libdir} -llockstep")
  set(LOCKSTEP_PC_LIBS_PRIVATE "${LOCKSTEP_PC_DEPENDENCY_LIBS}")
else()
  # No shared library to carry them: plain `pkg-config --libs` must list the dependencies.
  set(LOCKSTEP_PC_LIBS "-L\${libdir} -llockstep ${LOCKSTEP_PC_DEPENDENCY_LIBS}")
  set(LOCKSTEP_PC_LIBS_PRIVATE "")
endif()
# prefix is found from the .pc file's own location, so the file stays right wherever the tree is
# installed or moved to. Under /usr (the Debian package) it is simply /usr, which pkg-config then
# leaves out of the flags as a system directory.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(LOCKSTEP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _up ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig
       ${CMAKE_INSTALL_PREFIX})
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(LOCKSTEP_PC_PREFIX "\${pcfiledir}/${_up}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/lockstep.pc.in ${PROJECT_BINARY_DIR}/lockstep.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/lockstep.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
