# Compiler launcher, warnings and sanitizers shared by every target.

if(FLEET_CCACHE)
  find_program(CCACHE_PROGRAM ccache)
  if(CCACHE_PROGRAM)
    # pch_defines/time_macros let ccache reuse objects built with precompiled headers.
    set(_fleet_launcher "${CMAKE_COMMAND}" -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "${CCACHE_PROGRAM}")
    set(CMAKE_C_COMPILER_LAUNCHER ${_fleet_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_fleet_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_fleet_launcher})
    message(STATUS "ccache: ${CCACHE_PROGRAM}")
  endif()
endif()

add_library(fleet_warnings INTERFACE)
target_compile_options(fleet_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FLEET_WARNINGS_AS_ERRORS}>>:-Werror>)

if(SANITIZE)
  set(_fleet_san "-fsanitize=${SANITIZE}" -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_fleet_san}>")
  add_link_options(${_fleet_san})
  message(STATUS "Sanitizers: ${SANITIZE}")
endif()
