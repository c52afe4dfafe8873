# Third-party dependencies, all from Debian 12 packages (see README "Setup").
find_package(Threads REQUIRED)

include(${CMAKE_CURRENT_LIST_DIR}/accord_imported_targets.cmake)
accord_find_caf(ACCORD_CAF_FOUND)
if(NOT ACCORD_CAF_FOUND)
  message(FATAL_ERROR "CAF 0.17 not found (caf/all.hpp, libcaf_core, libcaf_io): apt-get install libcaf-dev")
endif()
accord_find_xxhash(ACCORD_XXHASH_FOUND)
if(NOT ACCORD_XXHASH_FOUND)
  message(FATAL_ERROR "xxHash not found (xxhash.h, libxxhash): apt-get install libxxhash-dev")
endif()

# UCX's own CMake config lacks inter-target dependencies; link all three.
find_package(ucx 1.13 CONFIG QUIET)
if(ucx_FOUND)
  set(ACCORD_UCX_LIBS ucx::ucp ucx::uct ucx::ucs)
else()
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx>=1.13)
  set(ACCORD_UCX_LIBS PkgConfig::UCX)
endif()

find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(OpenBLAS CONFIG REQUIRED)
add_library(accord_blas INTERFACE)
target_include_directories(accord_blas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(accord_blas INTERFACE ${OpenBLAS_LIBRARIES})
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)

# CUDA / NCCL: compiled whenever nvcc exists; binaries use only the runtime API so they
# start on machines without a driver (never link CUDA::cuda_driver, it needs libcuda.so.1).
set(ACCORD_HAVE_CUDA OFF)
if(ACCORD_WITH_CUDA)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 20)
    # CMake 3.25 does not know nvcc's C++20 flag (CMAKE_CUDA_STANDARD 20 fails at generate time
    # with "does not support this"); nvcc 13 accepts -std=c++20. Set here, for every folder:
    # programs that link the CUDA objects (tests, accord-bench-gpu) need it too.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION -std=c++20)
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION -std=c++20)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    find_package(CUDAToolkit REQUIRED)
    accord_find_nccl(ACCORD_NCCL_FOUND)
    if(NOT ACCORD_NCCL_FOUND)
      message(FATAL_ERROR "nvcc found but NCCL (libnccl, nccl.h) is missing beside CUDA")
    endif()
    set(ACCORD_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "accord: CUDA/NCCL parts ${ACCORD_HAVE_CUDA}")

# Internal headers are included as "folder/file.hpp" from the source root; the public
# embedder API lives in include/accord/. Installed (cmake/install.cmake), the internal
# headers sit in include/accord/<folder>/, hence the second install include directory.
# Static by default, shared with ACCORD_SHARED=ON (or BUILD_SHARED_LIBS=ON).
function(accord_library name)
  if(ACCORD_SHARED)
    add_library(${name} SHARED ${ARGN})
  else()
    add_library(${name} STATIC ${ARGN})
  endif()
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:include>
    $<INSTALL_INTERFACE:include/accord>)
endfunction()
