# Flags for Lockstep's own targets (not for third-party code).
function(lockstep_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(LOCKSTEP_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # GCC 12 reports -Wrestrict false positives inside libstdc++'s std::string operator+ at -O3
  # (GCC bug 105329); they are not in our code and would otherwise fail -Werror builds.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-restrict)
    # GCC 12 also warns when C++20 designated initialisers leave members to their defaults, which
    # is exactly how options structs are meant to be used (`Dense({.units = 128})`); GCC 13 stopped.
    target_compile_options(${target} PRIVATE -Wno-missing-field-initializers)
    # Under the sanitizers GCC 12 reports -Wmaybe-uninitialized inside libstdc++'s std::function
    # and std::regex (the instrumentation hides the initialisation from its flow analysis); the
    # builds without sanitizers keep the warning.
    if(LOCKSTEP_SANITIZE)
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()
  endif()
  # No floating-point contraction: the hand-written loops are built for baseline x86-64 (no FMA) and
  # for x86-64-v3/v4 (src/core/cpu_dispatch.h), and every build must give the same bits, so no
  # build may fuse a multiply and an add that the others round twice.
  target_compile_options(${target} PRIVATE -ffp-contract=off)
  if(CMAKE_BUILD_TYPE STREQUAL "Release")
    # The hot loops are written to be vectorised; this machine class has AVX-512 but the binary must
    # still run on any x86-64, so vector width is chosen at run time by oneDNN, not here.
    # -fno-math-errno lets GCC vectorise loops that call sqrt (the optimizers' updates); nothing
    # in Lockstep reads errno after a math function.
    target_compile_options(${target} PRIVATE -O3 -fno-math-errno)
  endif()
endfunction()

if(LOCKSTEP_SANITIZE)
  string(REPLACE ";" "," _san "${LOCKSTEP_SANITIZE}")
  add_compile_options(-fsanitize=${_san} -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${_san})
endif()
