"""The package's compiled libraries, loaded once by the loader the wheel carries
(``_prebuild_runtime``, copied in by the build): no JIT, no files written, no threads."""

from pathlib import Path

from ${package}._prebuild_runtime import load_package

LIBRARY = load_package(Path(__file__).resolve().parent)
