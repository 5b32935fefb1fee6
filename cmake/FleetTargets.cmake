# Helpers that give every target of the project the same shape.

# Every library's sources live in one folder (docs/architecture.md): the
# folders show the targets, and where the libtorch and CUDA boundaries are.
# Configuring stops on a library that takes sources from several.
function(fleet_check_one_folder name)
  set(_dirs "")
  foreach(_src ${ARGN})
    get_filename_component(_abs "${_src}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    get_filename_component(_dir "${_abs}" DIRECTORY)
    list(APPEND _dirs "${_dir}")
  endforeach()
  list(REMOVE_DUPLICATES _dirs)
  list(LENGTH _dirs _count)
  if(_count GREATER 1)
    message(FATAL_ERROR "library ${name} takes sources from ${_count} folders (${_dirs}): one folder, one target")
  endif()
endfunction()

# fleet_add_library(name SOURCES ... [DEPS ...]) — a static CPU library of a lib/ module.
function(fleet_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  fleet_check_one_folder(${name} ${ARG_SOURCES})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC
    "${PROJECT_SOURCE_DIR}/lib" "${PROJECT_BINARY_DIR}/generated")
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE fleet_warnings ${ARG_PRIVATE_DEPS})
endfunction()

# fleet_add_torch_library(name SOURCES ... [DEPS ...]) — a library that includes
# libtorch. It gets a precompiled header of the torch API (each torch
# translation unit costs ~20 s otherwise) and links Torch.
function(fleet_add_torch_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  fleet_add_library(${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS} ${TORCH_LIBRARIES}
                    PRIVATE_DEPS ${ARG_PRIVATE_DEPS})
  fleet_use_torch_pch(${name})
endfunction()

# One precompiled torch header is built once and reused by every torch target.
function(fleet_use_torch_pch target)
  if(NOT TARGET fleet_torch_pch)
    add_library(fleet_torch_pch STATIC "${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp")
    # Same warning flags as its users: -Wpedantic changes predefined macros,
    # and GCC refuses a precompiled header built with different ones.
    target_link_libraries(fleet_torch_pch PUBLIC ${TORCH_LIBRARIES} PRIVATE fleet_warnings)
    target_precompile_headers(fleet_torch_pch PRIVATE <torch/torch.h>)
  endif()
  if(NOT target STREQUAL "fleet_torch_pch")
    # REUSE_FROM needs identical code-generation flags, so no target of the
    # project sets POSITION_INDEPENDENT_CODE (libraries and programs alike
    # get the compiler's default).
    target_precompile_headers(${target} REUSE_FROM fleet_torch_pch)
  endif()
endfunction()

# fleet_add_cuda_library(name SOURCES ... [DEPS ...]) — CUDA code in its own target
# that links the CPU library, never the reverse.
function(fleet_add_cuda_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  fleet_check_one_folder(${name} ${ARG_SOURCES})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC
    "${PROJECT_SOURCE_DIR}/lib" "${PROJECT_BINARY_DIR}/generated")
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} CUDA::cudart)
  set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

# fleet_add_tool(name SOURCES ... DEPS ...) — one program under apps/.
function(fleet_add_tool name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} fleet_warnings)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin")
endfunction()

# fleet_add_gtest(name SOURCES ... DEPS ... [LABELS ...]) — a GoogleTest binary whose
# tests are registered one by one with CTest. Sanitizer builds read
# tests/lsan-suppressions.txt (leaks inside third-party libraries).
function(fleet_add_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main fleet_warnings)
  target_compile_definitions(${name} PRIVATE
    FLEET_SOURCE_DIR="${PROJECT_SOURCE_DIR}" FLEET_BINARY_DIR="${PROJECT_BINARY_DIR}")
  include(GoogleTest)
  gtest_discover_tests(${name}
                       PROPERTIES ENVIRONMENT "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan-suppressions.txt"
                       DISCOVERY_TIMEOUT 60)
  # Labels are set by a script CTest reads after the discovered list: passed
  # through gtest_discover_tests, a list of labels is flattened and all but
  # the first are lost (so `ctest -L gpu` would find nothing).
  set(_labels_script "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake")
  file(WRITE "${_labels_script}"
       "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_labels_script}")
endfunction()

# fleet_add_python_test(name script labels args...) — a test run by the project's
# Python (FLEET_PYTHON, with numpy/torch/h5py/safetensors/tokenizers/transformers);
# skipped with a message when that interpreter is missing.
function(fleet_add_python_test name script labels)
  if(FLEET_PYTHON)
    add_test(NAME ${name} COMMAND "${FLEET_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/${script}" ${ARGN})
  else()
    add_test(NAME ${name}
             COMMAND sh -c "echo 'SKIP: no Python with the interop packages; run scripts/install-deps.sh or set FLEET_PYTHON'; exit 77")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" SKIP_RETURN_CODE 77 TIMEOUT 600)
endfunction()
