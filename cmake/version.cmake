# Writes OUTPUT from TEMPLATE with ACCORD_FULL_VERSION: VERSION (the project's), followed by
# `git describe` of SOURCE when that is a git checkout. Run at every build; configure_file
# leaves OUTPUT untouched when the text is the same, so nothing is rebuilt then.
#   cmake -DVERSION=0.1.0 -DSOURCE=<dir> -DTEMPLATE=<in> -DOUTPUT=<out> -P cmake/version.cmake
set(ACCORD_FULL_VERSION "${VERSION}")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${SOURCE}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE}" describe --tags --always --dirty
                  OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                  RESULT_VARIABLE status)
  if(status EQUAL 0 AND described)
    set(ACCORD_FULL_VERSION "${VERSION} (git ${described})")
  endif()
endif()
configure_file("${TEMPLATE}" "${OUTPUT}" @ONLY)
