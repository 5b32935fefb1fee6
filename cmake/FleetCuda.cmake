# WITH_CUDA=AUTO|ON|OFF -> FLEET_WITH_CUDA (0/1).
#
# enable_language(CUDA) has to happen here, at the top directory, rather than
# next to the *_cuda targets: CMake requires a language to be enabled in the
# highest directory common to every target that compiles or links with it,
# and the programs under apps/ link the CUDA targets.
include(CheckLanguage)

set(FLEET_WITH_CUDA 0)
set(FLEET_CUDA_VERSION "")
string(TOUPPER "${WITH_CUDA}" _fleet_cuda_mode)
if(NOT _fleet_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "WITH_CUDA must be AUTO, ON or OFF (got '${WITH_CUDA}')")
endif()

if(NOT _fleet_cuda_mode STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # SASS for Ampere and Hopper, PTX for anything newer.
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 flags for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(FLEET_WITH_CUDA 1)
    set(FLEET_CUDA_VERSION "${CUDAToolkit_VERSION}")
    message(STATUS "CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(_fleet_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "WITH_CUDA=ON but no CUDA compiler (nvcc) was found. "
                        "Install the CUDA toolkit, set CMAKE_CUDA_COMPILER, or use WITH_CUDA=AUTO/OFF.")
  else()
    message(STATUS "CUDA: no nvcc found, building the CPU paths only (WITH_CUDA=AUTO)")
  endif()
endif()
