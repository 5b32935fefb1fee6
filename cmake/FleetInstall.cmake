# `cmake --install build --prefix P` and `cpack -G DEB` (from the build
# folder): the six programs in P/bin, the Orion helper libraries in
# P/lib/gpufleet (where orion-run and orion-profile look, beside bin/), man
# pages and bash completions generated from the programs' own --help, and
# the README. Libraries found outside the system folders (CUDA's runtime in
# /usr/local/cuda) stay on the installed programs' RPATH.
set(FLEET_PROGRAMS dz-compress dz-serve orion-profile orion-run sailor-plan sailor-run)
install(TARGETS ${FLEET_PROGRAMS} RUNTIME DESTINATION bin)
foreach(helper orion_client orion_capture)
  if(TARGET ${helper})
    install(TARGETS ${helper} LIBRARY DESTINATION lib/gpufleet)
  endif()
endforeach()
install(FILES README.md DESTINATION share/doc/gpufleet)
# The CUDA runtime the programs were linked with (NVIDIA lists it as
# redistributable): the package runs where no CUDA toolkit is installed.
if(TARGET CUDA::cudart)
  get_target_property(_cudart CUDA::cudart IMPORTED_LOCATION)
  if(_cudart)
    file(REAL_PATH "${_cudart}" _cudart_file)
    execute_process(COMMAND objdump -p "${_cudart_file}" OUTPUT_VARIABLE _cudart_dynamic ERROR_QUIET)
    string(REGEX MATCH "SONAME +([^\n ]+)" _ "${_cudart_dynamic}")
    if(CMAKE_MATCH_1)
      install(FILES "${_cudart_file}" DESTINATION lib/gpufleet RENAME "${CMAKE_MATCH_1}")
    endif()
  endif()
endif()

# Generated after the programs link. Not in sanitizer builds, whose programs
# may report leaks of third-party libraries on exit.
if(SANITIZE STREQUAL "")
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  set(_generated "")
  foreach(p ${FLEET_PROGRAMS})
    list(APPEND _generated "${PROJECT_BINARY_DIR}/share/man/man1/${p}.1"
                           "${PROJECT_BINARY_DIR}/share/bash-completion/completions/${p}")
  endforeach()
  add_custom_command(OUTPUT ${_generated}
    COMMAND Python3::Interpreter "${PROJECT_SOURCE_DIR}/scripts/gen_cli_docs.py" "${PROJECT_BINARY_DIR}/bin"
            "${PROJECT_BINARY_DIR}" ${FLEET_PROGRAMS}
    DEPENDS ${FLEET_PROGRAMS} "${PROJECT_SOURCE_DIR}/scripts/gen_cli_docs.py"
    COMMENT "Man pages and bash completions from the programs' --help")
  add_custom_target(cli_docs ALL DEPENDS ${_generated})
  install(DIRECTORY "${PROJECT_BINARY_DIR}/share/man" "${PROJECT_BINARY_DIR}/share/bash-completion"
          DESTINATION share)
endif()

set(CPACK_PACKAGE_NAME gpufleet)
set(CPACK_PACKAGE_CONTACT "gpufleet maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)  # a few seconds where xz takes minutes
# Depends from the binaries' shared libraries (dpkg-shlibdeps); CUDA's
# runtime comes from NVIDIA's installer, not a Debian package.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
include(CPack)
