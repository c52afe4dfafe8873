"""Builds the extension accord._accord with the project's CMake (python/CMakeLists.txt) for the
Python that runs the build, and the accord-launch binary beside it (the package's console script
runs it); pyproject.toml holds the package's metadata, the version comes from CMakeLists.txt.
Only the module's target is built, in build/pip (set CMAKE_ARGS for CMake,
CMAKE_BUILD_PARALLEL_LEVEL for jobs), or in an existing, configured build directory named by
ACCORD_BUILD_DIR (not reconfigured)."""
import os
import re
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, extension):
        build_dir = os.environ.get("ACCORD_BUILD_DIR")
        if build_dir:
            build_dir = os.path.join(ROOT, build_dir)  # relative to the repository root
        else:
            build_dir = os.path.join(ROOT, "build", "pip", "cmake")
            subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                            f"-DPython3_EXECUTABLE={sys.executable}", *shlex.split(os.environ.get("CMAKE_ARGS", ""))],
                           check=True)
        output = os.path.dirname(os.path.abspath(self.get_ext_fullpath(extension.name)))
        subprocess.run(["cmake", "--build", build_dir, "--target", "accord_python"], check=True)
        built = os.path.join(build_dir, "python", "accord", os.path.basename(self.get_ext_fullpath(extension.name)))
        if not os.path.exists(built):
            sys.exit(f"setup.py: CMake built no {built}: the configure step above says what is missing "
                     "(python3-dev, pybind11-dev)")
        os.makedirs(output, exist_ok=True)
        self.copy_file(built, output)
        # The target copies the launcher beside the module (python/CMakeLists.txt).
        self.copy_file(os.path.join(build_dir, "python", "accord", "accord-launch"), output)


def project_version():
    """The version of CMakeLists.txt's project(), which accord.__version__ reports too."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as cmake:
        return re.search(r"project\(accord VERSION ([0-9.]+)", cmake.read()).group(1)


setup(version=project_version(), ext_modules=[Extension("accord._accord", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build", "pip")}})
