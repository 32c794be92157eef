"""``[tool.prebuild]``: a native project's kernels, declared in its pyproject.toml.

A native project writes its kernels against PyTorch's stable ABI and lets prebuild compile
them (per-arch cp310-abi3 wheels, the manifest checked against the binaries, object reuse,
the build lock). prebuild's own kernels are declared the same way. Read the way
cibuildwheel reads ``[tool.cibuildwheel]``: typed options with defaults, and an error that
names the key for anything unknown or of the wrong type.

``parse_config`` is pure (the TOML tables in, a ``KernelProject`` out); ``read_config``
reads the file.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from prebuild.runtime.arch import Arch, ArchError, parse_arch_list
from prebuild.runtime.manifest import split_hook

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# The oldest torch whose stable ABI the kernels and building blocks compile for: the headers'
# version guards put what they use (std::string op arguments, Tensor::const_data_ptr) at 2.10,
# and 2.9 refuses them (tests/tool/builder/test_torch_target.py). The current CUDA stream comes
# from the AOTI shim (prebuild/cuda_launch.cuh), not from 2.13's Stream::nativeHandle().
MIN_TORCH_TARGET = Version("2.10")


class ConfigError(ValueError):
    """``[tool.prebuild]`` (or the pyproject.toml holding it) cannot be used; names the key."""


@dataclass(frozen=True)
class KernelProject:
    """A native project: what to compile, and where the results go."""

    root: Path  # the directory holding pyproject.toml
    name: str  # the distribution ([project] name)
    version: str  # the release; each wheel's version adds the local label (+cu130.sm90)
    package: str  # the import package the libraries are placed in
    namespace: str  # torch.ops namespace its STABLE_TORCH_LIBRARY registers
    sources: Path  # kernel sources: *.cpp (CPU library), *.cu (CUDA), *_simt.cpp (simt)
    include_dirs: tuple[Path, ...]  # besides the sources, prebuild's headers and torch's
    torch_target: Version  # the oldest torch the binaries load in
    default_archs: tuple[Arch, ...] | None  # None: every arch of prebuild's support table
    default_ptx: bool
    library: str  # base name: <library>.abi3.so, <library>_cuda.abi3.so, <library>_simt.abi3.so
    selftest: str | None = None  # "package.module:function" returning its SelftestCase list
    unity_build: bool = False  # the .cu (and simt) files compiled together, one unit per job

    @property
    def cpu_library(self) -> str:
        return f"{self.library}.abi3.so"

    @property
    def cuda_library(self) -> str:
        return f"{self.library}_cuda.abi3.so"

    @property
    def simt_library(self) -> str:
        return f"{self.library}_simt.abi3.so"


# key -> (what it must be, for the error message)
KEYS = {
    "version": "a version without a local label (e.g. 0.1.0)",
    "package": "a dotted Python package name",
    "namespace": "a Python identifier",
    "sources": "a directory relative to the project",
    "include-dirs": "a list of directories relative to the project",
    "torch-target": f"a torch version, {MIN_TORCH_TARGET} or newer",
    "default-archs": "a list of CUDA archs (or one comma-separated string)",
    "default-ptx": "true or false",
    "library": "a Python identifier",
    "selftest": "'package.module:function' (a dotted module path, a colon, an identifier)",
    "unity-build": "true or false",
}


def _fail(key: str, value: Any, why: str = "") -> ConfigError:
    return ConfigError(
        f"[tool.prebuild] {key} must be {KEYS[key]}, got {value!r}" + (f": {why}" if why else "")
    )


def _string(table: dict, key: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        raise _fail(key, value)
    return value


def _relative_dir(root: Path, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value or Path(value).is_absolute():
        raise _fail(key, value)
    path = (root / value).resolve()
    if not path.is_relative_to(root.resolve()):
        raise _fail(key, value, "it points outside the project")
    return path


def _identifier(table: dict, key: str, default: str) -> str:
    value = _string(table, key, default)
    if not value.isidentifier():
        raise _fail(key, value)
    return value


def parse_config(tool: dict, project: dict, root: Path) -> KernelProject:
    """Pure: ``[tool.prebuild]`` and ``[project]`` of the pyproject.toml in ``root``."""
    if not isinstance(tool, dict):
        raise ConfigError(f"[tool.prebuild] must be a table, got {tool!r}")
    unknown = sorted(set(tool) - set(KEYS))
    if unknown:
        hints = [
            f"{key!r}"
            + (
                f" (did you mean {close[0]!r}?)"
                if (close := difflib.get_close_matches(key, KEYS, 1))
                else ""
            )
            for key in unknown
        ]
        raise ConfigError(
            f"unknown key(s) in [tool.prebuild]: {', '.join(hints)}; the keys are {', '.join(KEYS)}"
        )
    name = project.get("name") if isinstance(project, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError("pyproject.toml has no [project] name: a native project needs one")
    if "version" in project or "version" not in project.get("dynamic", []):
        raise ConfigError(
            'a native project\'s version goes in [tool.prebuild] version, with "version" in '
            "[project] dynamic: each wheel's version adds the CUDA and archs (+cu130.sm90)"
        )
    try:
        version = Version(_string(tool, "version", ""))
    except InvalidVersion:
        raise _fail("version", tool.get("version")) from None
    if version.local:
        raise _fail("version", str(version), "prebuild adds the local label itself")
    package = _string(tool, "package", str(canonicalize_name(name)).replace("-", "_"))
    if not all(part.isidentifier() for part in package.split(".")):
        raise _fail("package", package)
    sources = _relative_dir(root, "sources", tool.get("sources", "csrc"))
    include = tool.get("include-dirs", [])
    if not isinstance(include, list):
        raise _fail("include-dirs", include)
    try:
        target = Version(_string(tool, "torch-target", str(MIN_TORCH_TARGET)))
    except InvalidVersion:
        raise _fail("torch-target", tool.get("torch-target")) from None
    if target < MIN_TORCH_TARGET:
        raise _fail(
            "torch-target",
            str(target),
            f"prebuild's building blocks need torch {MIN_TORCH_TARGET}'s stable ABI",
        )
    archs = tool.get("default-archs")
    if archs is not None:
        if isinstance(archs, list) and all(isinstance(a, str) for a in archs):
            archs = ",".join(archs)
        if not isinstance(archs, str):
            raise _fail("default-archs", archs)
        try:
            archs = parse_arch_list(archs)
        except ArchError as exc:
            raise _fail("default-archs", tool.get("default-archs"), str(exc)) from None
        if not archs:
            raise _fail("default-archs", tool.get("default-archs"), "it names no arch")
    ptx = tool.get("default-ptx", True)
    if not isinstance(ptx, bool):
        raise _fail("default-ptx", ptx)
    unity = tool.get("unity-build", False)
    if not isinstance(unity, bool):
        raise _fail("unity-build", unity)
    selftest = tool.get("selftest")
    if selftest is not None:
        try:
            split_hook(selftest)
        except ValueError:
            raise _fail("selftest", selftest) from None
    return KernelProject(
        root=root.resolve(),
        name=name,
        version=str(version),
        package=package,
        namespace=_identifier(tool, "namespace", package.replace(".", "_")),
        sources=sources,
        include_dirs=tuple(_relative_dir(root, "include-dirs", d) for d in include),
        torch_target=Version(f"{target.major}.{target.minor}"),
        default_archs=archs,
        default_ptx=ptx,
        library=_identifier(tool, "library", "_C"),
        selftest=selftest,
        unity_build=unity,
    )


PYPROJECT = "pyproject.toml"


def read_pyproject(root: Path) -> dict:
    path = Path(root) / PYPROJECT
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def declares_kernels(root: Path) -> bool:
    """Whether the project in ``root`` has a ``[tool.prebuild]`` table (a native project)."""
    return "prebuild" in read_pyproject(root).get("tool", {})


def read_config(root: Path) -> KernelProject:
    """The native project in ``root``; ConfigError when it declares none or declares it wrongly."""
    data = read_pyproject(root)
    if "prebuild" not in data.get("tool", {}):
        raise ConfigError(f"{Path(root) / PYPROJECT} has no [tool.prebuild] table")
    return parse_config(data["tool"]["prebuild"], data.get("project", {}), Path(root))
