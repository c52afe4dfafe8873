# accord as a CMake package: after `cmake --install`, other projects call
#   find_package(accord 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE accord::accord)
# accord::accord links the whole stack; accord::<library> (accord::accord_actors, ...) exist too.
# The public headers (<accord/job.hpp>, <accord/model.hpp>) land in include/accord/; the
# internal "folder/file.hpp" headers in include/accord/<folder>/ for embedders who compose
# actors or reuse the built-in models (accord_library() puts include/accord on their path).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ACCORD_PACKAGE_LIBRARIES)
foreach(library accord_models accord_data accord_optim accord_transport accord_transport_ucx
                accord_gpu accord_actors)
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

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/accord DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models ${PROJECT_SOURCE_DIR}/data ${PROJECT_SOURCE_DIR}/optim
                  ${PROJECT_SOURCE_DIR}/transport ${PROJECT_SOURCE_DIR}/gpu ${PROJECT_SOURCE_DIR}/actors
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
