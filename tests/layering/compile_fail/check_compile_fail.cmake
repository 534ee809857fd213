# cmake -DCXX=<compiler> -DINCLUDE_DIR=<include/> -DSOURCE=<snippet> [-DFORCE_INCLUDE=<header>]
#       -P check_compile_fail.cmake
#
# The snippet must compile as written (it calls the differentiable ops) and must fail to compile
# with LOCKSTEP_CALL_RAW_KERNELS defined (it then calls ops::<op> for each of them), the errors
# naming every one of those ops: a raw kernel never shares a differentiable op's name.
foreach(var CXX INCLUDE_DIR SOURCE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compile_fail.cmake: expected -D${var}=..., received none")
  endif()
endforeach()
# The C locale keeps the compiler's quotes ASCII, as the messages are matched below.
set(_cxx ${CMAKE_COMMAND} -E env LC_ALL=C LANG=C LANGUAGE= ${CXX})
set(_flags -std=c++20 -fsyntax-only -fmax-errors=0 -I${INCLUDE_DIR})
if(DEFINED FORCE_INCLUDE)
  list(APPEND _flags -include ${FORCE_INCLUDE})
endif()
list(APPEND _flags ${SOURCE})

execute_process(COMMAND ${_cxx} ${_flags} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "The differentiable calls in ${SOURCE} do not compile, so the raw-kernel "
                      "check below would prove nothing:\n${_out}")
endif()

execute_process(COMMAND ${_cxx} -DLOCKSTEP_CALL_RAW_KERNELS ${_flags} RESULT_VARIABLE _rc
                OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(_rc EQUAL 0)
  message(FATAL_ERROR "Calling raw kernels by the differentiable ops' names compiled: a layer "
                      "can call ops::<op> and lose its gradient (expected a compile error).")
endif()

file(READ ${SOURCE} _text)
string(REGEX MATCHALL "OP\\(([a-z0-9_]+)\\)\\(" _calls "${_text}")
list(LENGTH _calls _count)
if(_count LESS 10)
  message(FATAL_ERROR "Expected the snippet to call many ops through OP(...), found ${_count}")
endif()
set(_compiled_names "")
foreach(call ${_calls})
  string(REGEX REPLACE "OP\\(([a-z0-9_]+)\\)\\(" "\\1" name "${call}")
  # GCC: 'relu' is not a member of 'lockstep::ops'; Clang: no member named 'relu' in namespace...
  if(NOT _out MATCHES "'${name}' is not a member of 'lockstep::ops'"
     AND NOT _out MATCHES "no member named '${name}' in namespace 'lockstep::ops'")
    list(APPEND _compiled_names ${name})
  endif()
endforeach()
if(_compiled_names)
  message(FATAL_ERROR "ops:: has a kernel named like the differentiable op (expected none, "
                      "received: ${_compiled_names}). Compiler output:\n${_out}")
endif()
message(STATUS "${_count} differentiable ops; no ops:: kernel shares a name with one")
