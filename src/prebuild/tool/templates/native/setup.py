"""The whole build: prebuild compiles csrc/ as [tool.prebuild] in pyproject.toml says and puts
the libraries, their manifest and the loader into the package."""

from prebuild.tool.builder.setuptools_ext import kernels_setup

kernels_setup()
