"""The package's own compiled libraries, loaded once when the first op module is imported."""

from pathlib import Path

from prebuild.runtime import load_package

LIBRARY = load_package(Path(__file__).resolve().parent.parent)
