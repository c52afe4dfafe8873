# What an embedder sees: installs an already-built accord tree into a scratch prefix, then
# configures, builds and runs examples/embed against it through find_package(accord).
#   cmake -DACCORD_BUILD_DIR=<built tree> -DSOURCE=<accord sources> -DWORK_DIR=<scratch>
#         [-DCONFIG=Release] [-DGENERATOR=...] [-DCXX_COMPILER=...] -P cmake/test_package.cmake
foreach(required ACCORD_BUILD_DIR SOURCE WORK_DIR)
  if(NOT ${required})
    message(FATAL_ERROR "test_package.cmake: -D${required}=... is missing")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

function(run_step name)
  message(STATUS "package test: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "package test: ${name} failed (${status})")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(embed_build ${WORK_DIR}/embed)
file(REMOVE_RECURSE ${WORK_DIR})

set(configure_options -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_PREFIX_PATH=${prefix})
if(GENERATOR)
  list(APPEND configure_options -G ${GENERATOR})
endif()
if(CXX_COMPILER)
  list(APPEND configure_options -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()

run_step("install into ${prefix}" ${CMAKE_COMMAND} --install ${ACCORD_BUILD_DIR} --config ${CONFIG} --prefix ${prefix})
run_step("configure examples/embed" ${CMAKE_COMMAND} -S ${SOURCE}/examples/embed -B ${embed_build} ${configure_options})
run_step("build examples/embed" ${CMAKE_COMMAND} --build ${embed_build} --config ${CONFIG})
# Single-config generators put the program in the build folder, multi-config ones in <config>/.
find_program(embed_program accord-embed PATHS ${embed_build} ${embed_build}/${CONFIG} NO_DEFAULT_PATH REQUIRED)
run_step("run accord-embed" ${embed_program})
