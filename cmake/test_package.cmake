# What an embedder sees: installs an already-built accord tree into a scratch prefix, then
#  - builds every example (each folder of examples/ holding a CMakeLists.txt) against it through
#    find_package(accord) and runs its tests: an example declares how it runs with add_test(),
#    so a new folder joins without changes here;
#  - builds the CPU-only consumer tests/package through find_package(accord) and through
#    pkg-config and runs it: it fails when a CUDA, cuBLAS or NCCL library was mapped;
#  - runs the installed accord-train --version.
#   cmake -DACCORD_BUILD_DIR=<built tree> -DSOURCE=<accord sources> -DWORK_DIR=<scratch>
#         -DVERSION=<project version> [-DCUDA_PLUGIN=ON] [-DCONFIG=Release] [-DGENERATOR=...]
#         [-DCXX_COMPILER=...] [-DCTEST=<ctest>] -P cmake/test_package.cmake
foreach(required ACCORD_BUILD_DIR SOURCE WORK_DIR VERSION)
  if(NOT ${required})
    message(FATAL_ERROR "test_package.cmake: -D${required}=... is missing")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()
if(NOT CTEST)
  get_filename_component(cmake_bin_dir ${CMAKE_COMMAND} DIRECTORY)
  set(CTEST ${cmake_bin_dir}/ctest)
endif()

# Runs a step; its output is shown, and a failure stops the test naming the step.
function(run_step name)
  message(STATUS "package test: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  message("${output}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "package test: ${name} failed (${status})")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})

set(configure_options -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_PREFIX_PATH=${prefix})
if(GENERATOR)
  list(APPEND configure_options -G ${GENERATOR})
endif()
if(CXX_COMPILER)
  list(APPEND configure_options -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()

run_step("install into ${prefix}" ${CMAKE_COMMAND} --install ${ACCORD_BUILD_DIR} --config ${CONFIG} --prefix ${prefix})

file(GLOB_RECURSE pc_files ${prefix}/*/accord.pc)
if(NOT pc_files)
  message(FATAL_ERROR "package test: no accord.pc installed under ${prefix}")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
get_filename_component(libdir ${pc_dir} DIRECTORY)
if(CUDA_PLUGIN AND NOT EXISTS ${libdir}/libaccord_cuda.so)
  message(FATAL_ERROR "package test: the CUDA plugin was built but is not installed in ${libdir}")
endif()

run_step("accord-train --version" ${prefix}/bin/accord-train --version)
if(NOT step_output MATCHES "^accord-train ${VERSION}")
  message(FATAL_ERROR "package test: accord-train --version printed '${step_output}', expected accord-train ${VERSION}...")
endif()

# Every example, through find_package.
file(GLOB example_lists ${SOURCE}/examples/*/CMakeLists.txt)
if(NOT example_lists)
  message(FATAL_ERROR "package test: no example under ${SOURCE}/examples")
endif()
foreach(example_list ${example_lists})
  get_filename_component(example_dir ${example_list} DIRECTORY)
  get_filename_component(example ${example_dir} NAME)
  set(example_build ${WORK_DIR}/examples/${example})
  run_step("configure examples/${example}" ${CMAKE_COMMAND} -S ${example_dir} -B ${example_build} ${configure_options})
  run_step("build examples/${example}" ${CMAKE_COMMAND} --build ${example_build} --config ${CONFIG})
  execute_process(COMMAND ${CMAKE_COMMAND} -E chdir ${example_build}
                  ${CTEST} -C ${CONFIG} --output-on-failure --no-tests=error RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "package test: examples/${example}: its tests failed, or it declares none (add_test)")
  endif()
endforeach()

# The CPU-only consumer, through find_package and through pkg-config.
foreach(via find_package pkg_config)
  set(probe_build ${WORK_DIR}/probe_${via})
  set(via_pkg_config OFF)
  if(via STREQUAL "pkg_config")
    set(via_pkg_config ON)
  endif()
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  run_step("configure tests/package (${via})" ${CMAKE_COMMAND} -S ${SOURCE}/tests/package -B ${probe_build}
           ${configure_options} -DACCORD_PACKAGE_VIA_PKG_CONFIG=${via_pkg_config})
  run_step("build tests/package (${via})" ${CMAKE_COMMAND} --build ${probe_build} --config ${CONFIG})
  find_program(probe accord-package-probe PATHS ${probe_build} ${probe_build}/${CONFIG} NO_DEFAULT_PATH NO_CACHE REQUIRED)
  run_step("CPU-only consumer (${via}) maps no CUDA library" ${probe})
  run_step("empty consumer (${via}) maps no CUDA library" ${probe} empty)
endforeach()
