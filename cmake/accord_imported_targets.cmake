# Imported targets for the dependencies that ship no usable CMake config on Debian. Shared by
# the build (cmake/dependencies.cmake) and the installed package (accordConfig.cmake), so both
# find them the same way. Each macro sets <found_var> to TRUE or FALSE and never fails itself.

# CAF 0.17: CAF::core and CAF::io (Debian ships neither a CMake config nor a pkg-config file).
macro(accord_find_caf found_var)
  set(${found_var} TRUE)
  if(NOT TARGET CAF::core)
    find_package(CAF CONFIG QUIET)
    if(NOT CAF_FOUND)
      find_path(CAF_INCLUDE_DIR caf/all.hpp)
      find_library(CAF_CORE_LIBRARY caf_core)
      find_library(CAF_IO_LIBRARY caf_io)
      if(NOT CAF_INCLUDE_DIR OR NOT CAF_CORE_LIBRARY OR NOT CAF_IO_LIBRARY)
        set(${found_var} FALSE)
      else()
        add_library(CAF::core UNKNOWN IMPORTED)
        set_target_properties(CAF::core PROPERTIES IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES Threads::Threads)
        add_library(CAF::io UNKNOWN IMPORTED)
        set_target_properties(CAF::io PROPERTIES IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
          INTERFACE_LINK_LIBRARIES CAF::core)
      endif()
    endif()
  endif()
endmacro()

# NCCL::nccl next to the CUDA toolkit (NCCL has no CMake config); needs find_package(CUDAToolkit).
macro(accord_find_nccl found_var)
  set(${found_var} TRUE)
  if(NOT TARGET NCCL::nccl)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NOT NCCL_LIBRARY OR NOT NCCL_INCLUDE_DIR)
      set(${found_var} FALSE)
    else()
      add_library(NCCL::nccl SHARED IMPORTED)
      set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    endif()
  endif()
endmacro()

# xxHash::xxhash: Debian's libxxhash-dev ships a pkg-config file but no CMake config.
macro(accord_find_xxhash found_var)
  set(${found_var} TRUE)
  if(NOT TARGET xxHash::xxhash)
    find_path(XXHASH_INCLUDE_DIR xxhash.h)
    find_library(XXHASH_LIBRARY xxhash)
    if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
      set(${found_var} FALSE)
    else()
      add_library(xxHash::xxhash UNKNOWN IMPORTED)
      set_target_properties(xxHash::xxhash PROPERTIES IMPORTED_LOCATION "${XXHASH_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
    endif()
  endif()
endmacro()
