#pragma once
// accord's version: the project version from CMake, followed by `git describe` of the sources
// when they were built from a git checkout ("0.1.0 (git df03db9-dirty)").
#include <string_view>

namespace accord {

std::string_view version();

}  // namespace accord
