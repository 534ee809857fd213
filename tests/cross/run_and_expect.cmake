#   cmake -DEMULATOR=<a::b> -DPROGRAM=<file> -DARGS=<a::b> -DEXPECT=<regex::regex> -P <this file>
# Runs the program under the emulator, prints its output, and fails unless it exits 0 and every
# regex matches the output (ctest's PASS_REGULAR_EXPRESSION passes when any one matches).
string(REPLACE "::" ";" EMULATOR "${EMULATOR}")
string(REPLACE "::" ";" ARGS "${ARGS}")
string(REPLACE "::" ";" EXPECT "${EXPECT}")
execute_process(COMMAND ${EMULATOR} ${PROGRAM} ${ARGS} OUTPUT_VARIABLE out ERROR_VARIABLE out
                RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ${ARGS} exited ${rc}")
endif()
foreach(want IN LISTS EXPECT)
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "not in the output of ${PROGRAM} ${ARGS}: ${want}")
  endif()
endforeach()
