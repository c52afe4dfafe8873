# accord as a CMake package: after `cmake --install`, other projects call
#   find_package(accord 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE accord::accord)
# accord::accord links the whole stack; accord::<library> (accord::accord_job, ...) exist too.
# Or through pkg-config: `pkg-config --cflags --libs accord` (lib/pkgconfig/accord.pc).
# Neither links CUDA: the CUDA plugin (lib/libaccord_cuda.so) is loaded at run time, only for a
# GPU path; consumers get a RUNPATH to lib/ so that it is found there.
# The public headers (<accord/job.hpp>, <accord/model.hpp>) land in include/accord/; the
# internal "folder/file.hpp" headers in include/accord/<folder>/ for embedders who compose
# actors or reuse the built-in models (accord_library() puts include/accord on their path).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# In link order (a library before those it uses), for pkg-config's static link line.
set(ACCORD_PACKAGE_LIBRARIES)
foreach(library accord_job accord_topologies accord_actors accord_membership accord_algorithms accord_recovery accord_cluster
                accord_observe accord_transport_ucx accord_gpu accord_optim accord_data accord_models
                accord_transport accord_version)
  if(TARGET ${library})
    list(APPEND ACCORD_PACKAGE_LIBRARIES ${library})
    # The public headers use std::span: consumers need C++20 too.
    target_compile_features(${library} INTERFACE cxx_std_20)
  endif()
endforeach()

add_library(accord INTERFACE)
target_link_libraries(accord INTERFACE ${ACCORD_PACKAGE_LIBRARIES})
add_library(accord::accord ALIAS accord)

# accord_blas is exported because accord_models links it; the package config replaces the
# OpenBLAS paths it carries with those found on the consuming machine.
install(TARGETS ${ACCORD_PACKAGE_LIBRARIES} accord accord_blas EXPORT accordTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

if(TARGET accord_cuda)
  install(TARGETS accord_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/accord DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models ${PROJECT_SOURCE_DIR}/data ${PROJECT_SOURCE_DIR}/optim
                  ${PROJECT_SOURCE_DIR}/transport ${PROJECT_SOURCE_DIR}/gpu ${PROJECT_SOURCE_DIR}/actors
                  ${PROJECT_SOURCE_DIR}/algorithms ${PROJECT_SOURCE_DIR}/topologies ${PROJECT_SOURCE_DIR}/job
                  ${PROJECT_SOURCE_DIR}/cluster ${PROJECT_SOURCE_DIR}/recovery ${PROJECT_SOURCE_DIR}/observe
                  ${PROJECT_SOURCE_DIR}/membership
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/accord
  FILES_MATCHING PATTERN "*.hpp")

set(ACCORD_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/accord)
install(EXPORT accordTargets NAMESPACE accord:: DESTINATION ${ACCORD_PACKAGE_DIR})

# What the config must find again for the imported targets the exported ones link.
if(TARGET accord_transport_ucx)
  set(ACCORD_PACKAGE_UCX "${ACCORD_UCX_LIBS}")
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/accordConfig.cmake.in
  ${PROJECT_BINARY_DIR}/accordConfig.cmake INSTALL_DESTINATION ${ACCORD_PACKAGE_DIR})
# 0.x: a minor release may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/accordConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/accordConfig.cmake ${PROJECT_BINARY_DIR}/accordConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/accord_imported_targets.cmake DESTINATION ${ACCORD_PACKAGE_DIR})

# pkg-config: relocatable (paths relative to the .pc file), the same libraries and flags as
# accord::accord. Libraries without a .pc file on Debian (CAF) are named directly.
set(ACCORD_PC_LIBS "")
foreach(library ${ACCORD_PACKAGE_LIBRARIES})
  string(APPEND ACCORD_PC_LIBS " -l${library}")
endforeach()
set(ACCORD_PC_REQUIRES "zlib, openblas, libxxhash")
if(TARGET accord_transport_ucx)
  string(APPEND ACCORD_PC_REQUIRES ", ucx >= 1.13")
endif()
set(ACCORD_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH ACCORD_PC_TO_PREFIX /${ACCORD_PC_DIR} /)
string(REGEX REPLACE "/$" "" ACCORD_PC_TO_PREFIX "${ACCORD_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/accord.pc.in ${PROJECT_BINARY_DIR}/accord.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/accord.pc DESTINATION ${ACCORD_PC_DIR})
