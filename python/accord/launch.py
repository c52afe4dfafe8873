"""accord-launch from the Python package: `pip install` makes it the accord-launch console script,
and `python -m accord.launch` runs it too. It runs the launcher binary the package carries (built
with its extension), telling it to run .py scripts and -m modules with this Python, as torchrun
does with its own (accord-launch --help says the rest)."""
import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accord-launch")
    if not os.access(binary, os.X_OK):
        sys.exit(f"accord-launch: this accord package has no launcher at {binary} (pip install and a CMake "
                 "build of the accord_python target put it there)")
    if not os.environ.get("ACCORD_LAUNCH_PYTHON"):  # one set by hand wins
        os.environ["ACCORD_LAUNCH_PYTHON"] = sys.executable
    os.execv(binary, ["accord-launch", *sys.argv[1:]])


if __name__ == "__main__":
    main()
