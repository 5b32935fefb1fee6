# Every third-party dependency, found once. scripts/install-deps.sh installs them.

find_package(Threads REQUIRED)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
# HDF5 through CMake's FindHDF5, or given by path (FLEET_HDF5_INCLUDE_DIR and
# FLEET_HDF5_LIBRARY) for installs that FindHDF5 cannot interrogate, such as
# a Debian package unpacked into a private prefix (scripts/gpu-check.sh).
set(FLEET_HDF5_INCLUDE_DIR "" CACHE PATH "hdf5.h folder (with FLEET_HDF5_LIBRARY: skip FindHDF5)")
set(FLEET_HDF5_LIBRARY "" CACHE FILEPATH "libhdf5 to link (with FLEET_HDF5_INCLUDE_DIR: skip FindHDF5)")
if(FLEET_HDF5_INCLUDE_DIR AND FLEET_HDF5_LIBRARY)
  set(HDF5_C_INCLUDE_DIRS "${FLEET_HDF5_INCLUDE_DIR}")
  set(HDF5_C_LIBRARIES "${FLEET_HDF5_LIBRARY}")
  message(STATUS "HDF5: ${FLEET_HDF5_LIBRARY} (given)")
else()
  find_package(HDF5 REQUIRED COMPONENTS C)
endif()

# zstd: prefer the CMake package, fall back to pkg-config (older distributions).
find_package(zstd CONFIG QUIET)
if(TARGET zstd::libzstd_shared)
  add_library(fleet_zstd INTERFACE)
  target_link_libraries(fleet_zstd INTERFACE zstd::libzstd_shared)
else()
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
  add_library(fleet_zstd INTERFACE)
  target_link_libraries(fleet_zstd INTERFACE PkgConfig::ZSTD)
endif()

# Oniguruma: the regular-expression engine of Hugging Face tokenizers, so that
# tokenizer.json patterns match the same text here.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ONIGURUMA REQUIRED IMPORTED_TARGET oniguruma)

# cpp-httplib (Debian's libcpp-httplib-dev: a declarations header and the
# compiled libcpp-httplib.so): dz-serve's server and load generator.
find_path(FLEET_HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
find_library(FLEET_HTTPLIB_LIBRARY cpp-httplib REQUIRED)
add_library(fleet_httplib INTERFACE)
target_include_directories(fleet_httplib SYSTEM INTERFACE "${FLEET_HTTPLIB_INCLUDE_DIR}")
target_link_libraries(fleet_httplib INTERFACE "${FLEET_HTTPLIB_LIBRARY}" Threads::Threads)
# The library was compiled with its features switched on (Debian's: OpenSSL,
# zlib, Brotli), and the header's classes change layout with them: every
# translation unit must see the same macros, or a Client built by the
# library overruns the one the caller allocated. pkg-config says which.
pkg_check_modules(FLEET_HTTPLIB_PC QUIET cpp-httplib)
if(FLEET_HTTPLIB_PC_FOUND)
  target_compile_options(fleet_httplib INTERFACE ${FLEET_HTTPLIB_PC_CFLAGS_OTHER})
else()
  message(WARNING "cpp-httplib has no pkg-config file: its build's feature macros are unknown; "
                  "define them (CPPHTTPLIB_OPENSSL_SUPPORT, ...) as the library was built")
endif()

add_library(fleet_hdf5 INTERFACE)
target_include_directories(fleet_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(fleet_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(fleet_hdf5 INTERFACE ${HDF5_DEFINITIONS})

set(FLEET_WITH_TORCH 0)
set(FLEET_TORCH_CUDA 0)
set(FLEET_TORCH_VERSION "")
if(WITH_TORCH)
  find_package(Torch REQUIRED)
  set(FLEET_WITH_TORCH 1)
  if(TARGET torch_cuda)
    set(FLEET_TORCH_CUDA 1)  # a CUDA build of libtorch (PyTorch's), not Debian's CPU one
  endif()
  if(DEFINED Torch_VERSION)
    set(FLEET_TORCH_VERSION "${Torch_VERSION}")
  endif()
  # PyTorch's libtorch.so 2.x exports a partial copy of std::filesystem
  # (remove_all, equivalent, ...). Listed before libstdc++ it would take those
  # calls, and some of its entry points crash. libstdc++ goes first instead.
  if(Torch_VERSION VERSION_GREATER_EQUAL 2)
    add_link_options("LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
  endif()
  # Torch's imported targets carry its ABI flag. PyTorch's libtorch 2.x also
  # ships the headers of its own (newer) fmt, and its include folder comes
  # before the system's: spdlog, built on the system's fmt, would then see the
  # wrong one. A folder holding only the system's fmt goes first instead.
  get_target_property(_fleet_fmt_dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  list(GET _fleet_fmt_dirs 0 _fleet_fmt_dir)
  foreach(_fleet_dir IN LISTS TORCH_INCLUDE_DIRS)
    if(EXISTS "${_fleet_dir}/fmt/format.h" AND NOT _fleet_dir STREQUAL _fleet_fmt_dir)
      set(_fleet_shim "${CMAKE_BINARY_DIR}/generated/system-fmt")
      file(MAKE_DIRECTORY "${_fleet_shim}")
      file(CREATE_LINK "${_fleet_fmt_dir}/fmt" "${_fleet_shim}/fmt" SYMBOLIC)
      include_directories(BEFORE SYSTEM "${_fleet_shim}")
      message(STATUS "libtorch ships its own fmt: using the system's (${_fleet_fmt_dir}) ahead of it")
      break()
    endif()
  endforeach()
endif()

if(BUILD_TESTING OR NOT DEFINED BUILD_TESTING)
  find_package(GTest REQUIRED)
  find_package(benchmark QUIET)
endif()

# Debian's interpreter with numpy/torch plus the project's virtual environment
# (scripts/install-deps.sh makes it in .venv) for interop tests.
set(FLEET_PYTHON "" CACHE FILEPATH "Python with numpy, safetensors, h5py, hdf5plugin for interop tests")
if(NOT FLEET_PYTHON)
  if(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
    set(FLEET_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH "" FORCE)
  endif()
endif()
