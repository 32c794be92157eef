"""The setuptools side of a native project's build: a ``build_ext`` that compiles with ninja
and nvcc, and ``kernels_setup()``, the whole of such a project's setup.py.

torch's ``BuildExtension`` refuses to compile CUDA when the installed torch is a CPU build
and gives no per-arch control, so this command drives the compilers itself (through
``prebuild.tool.builder.compile``) and then places the libraries and the manifest in the
project's package. What to build comes from ``[tool.prebuild]`` in the project's
pyproject.toml (``prebuild.tool.builder.config``); the archs from ``PREBUILD_ARCHS`` (see
docs/getting-started.md, "Building from source with pip").

Run by ``prebuild wheel`` (``PREBUILD_COMPILED`` set: see ``pipeline``), it compiles nothing:
it packages the libraries that ``prebuild wheel`` compiled, from their record. Run by anything
else (pip, cibuildwheel, ``python -m build``), it runs the preflight and the compile itself.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from packaging.version import Version
from setuptools.command.build_ext import build_ext

from prebuild import runtime
from prebuild.runtime.manifest import MANIFEST_NAME, Library, Manifest, sha256_file
from prebuild.tool.builder import flags
from prebuild.tool.builder.compile import (
    BuildError,
    CompiledLibraries,
    compile_libraries,
    default_build_dir,
    read_compiled,
)
from prebuild.tool.builder.compile_cache import (
    CACHE_ENV,
    CacheSpecError,
    compile_cache,
    parse_cache_spec,
)
from prebuild.tool.builder.config import KernelProject, read_config
from prebuild.tool.builder.toolchain import Nvcc, find_nvcc


def build_options(project: KernelProject) -> flags.BuildOptions:
    return flags.BuildOptions.from_env(
        default_archs=project.default_archs, default_ptx=project.default_ptx
    )


def package_version(
    project: KernelProject, options: flags.BuildOptions, cuda: Version | None
) -> str:
    """``0.1.0+cu130.sm80`` for the arch set being built with CUDA ``cuda``, ``0.1.0+cpu``
    without CUDA."""
    label = flags.local_version_label(
        cuda, options.archs, options.ptx_archs, options.archs_in_version
    )
    return f"{project.version}+{label}"


def build_cuda_version(options: flags.BuildOptions) -> Version | None:
    """The CUDA version the libraries are (or will be) compiled with: the one recorded by
    ``prebuild wheel``'s compile, else nvcc's; None for CPU code only."""
    if not options.cuda:
        return None
    if options.compiled is not None:
        cuda = _recorded(options.compiled).cuda_version
        return Version(cuda) if cuda else None
    return Nvcc(find_nvcc()).version


def _recorded(path: Path) -> CompiledLibraries:
    try:
        return read_compiled(path)
    except BuildError as exc:
        raise SystemExit(f"prebuild: {exc}") from None


# The runtime loader is self-contained (relative imports, no dependency besides torch): a
# native project's wheel carries a copy under this name, so it needs only torch at run time.
VENDORED_RUNTIME = "_prebuild_runtime"
RUNTIME_HOME = runtime.__name__.rpartition(".")[0]  # the package whose own runtime it is


def vendor_runtime(package_dir: Path) -> list[Path]:
    """Copy the loader into ``package_dir/_prebuild_runtime/`` (replacing an older copy):
    ``from ._prebuild_runtime import load_package`` in the project's package."""
    target = package_dir / VENDORED_RUNTIME
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    copied = []
    for source in map(Path, runtime.source_files()):
        shutil.copyfile(source, target / source.name)
        copied.append(target / source.name)
    return copied


def _print_progress(done: int, total: int, what: str) -> None:
    print(f"prebuild: [{done}/{total}] {what}", file=sys.stderr, flush=True)


def _manifest_flags(compile_flags: dict[str, list[str]]) -> dict[str, list[str]]:
    # Include paths name the build machine's directories: not part of what was built.
    return {k: [f for f in v if not f.startswith("-I")] for k, v in compile_flags.items()}


def compile_through_cache(project: KernelProject, options: flags.BuildOptions):
    """``compile_libraries``; in a source build (pip, cibuildwheel) with ``PREBUILD_CACHE`` set,
    through a compile cache of its own, whose summary is printed."""
    try:
        spec = parse_cache_spec(os.environ.get(CACHE_ENV)) if options.launcher is None else None
    except CacheSpecError as exc:
        raise SystemExit(f"prebuild: {exc}") from None
    if spec is None:
        return compile_libraries(project, options, on_progress=_print_progress)
    work = options.build_dir or default_build_dir(project.root)

    def warn(message: str) -> None:
        print(f"prebuild: compile cache: {message}", file=sys.stderr, flush=True)

    with compile_cache(spec, work, warn) as cache:
        compiled = compile_libraries(
            project, replace(options, launcher=cache.launcher), on_progress=_print_progress
        )
    for line in cache.report.lines():
        print(f"prebuild: {line}", file=sys.stderr, flush=True)
    return compiled


def compiled_libraries(project: KernelProject, options: flags.BuildOptions) -> CompiledLibraries:
    """The libraries to package: those ``prebuild wheel`` compiled (``options.compiled``: no
    preflight, no compile, not even ninja's no-op), else compiled here."""
    if options.compiled is not None:
        return _recorded(options.compiled)
    return compile_through_cache(project, options)


class KernelBuildExt(build_ext):
    """Compiles the project's libraries, then copies them with a manifest into its package."""

    def run(self) -> None:
        project = read_config(Path(os.getcwd()))
        options = build_options(project)
        compiled = compiled_libraries(project, options)
        package_dir = Path(self.get_ext_fullpath(f"{project.package}.{project.library}")).parent
        package_dir.mkdir(parents=True, exist_ok=True)

        built = [(compiled.cpu_library, "cpu")]
        for path, kind, name in (
            (compiled.cuda_library, "cuda", project.cuda_library),
            (compiled.simt_library, "simt", project.simt_library),
        ):
            if path is not None:
                built.append((path, kind))
            else:
                # A rebuild in place must not leave an older library of this kind behind.
                (package_dir / name).unlink(missing_ok=True)
        libraries = []
        for path, kind in built:
            target = package_dir / path.name
            tmp = target.with_name(target.name + ".tmp")
            shutil.copyfile(path, tmp)
            tmp.replace(target)  # atomic: a running process never sees a half-copied file
            libraries.append(Library(path.name, kind, sha256_file(target), target.stat().st_size))

        Manifest(
            package_version=package_version(
                project, options, Version(compiled.cuda_version) if compiled.cuda_version else None
            ),
            op_namespace=project.namespace,
            package=project.package,
            torch_target=str(project.torch_target),
            built_with_torch=compiled.torch.version_string,
            cuda_version=compiled.cuda_version,
            sass_archs=options.archs if compiled.cuda_library else (),
            ptx_archs=options.ptx_archs if compiled.cuda_library else (),
            libraries=tuple(libraries),
            flags=_manifest_flags(compiled.flags),
            selftest=project.selftest,
        ).write(package_dir)
        self._outputs = [package_dir / MANIFEST_NAME] + [package_dir / p.name for p, _ in built]
        if project.package != RUNTIME_HOME:
            self._outputs += vendor_runtime(package_dir)

    def get_outputs(self) -> list[str]:
        return [str(p) for p in getattr(self, "_outputs", [])]


def kernels_setup(**kwargs) -> None:
    """A native project's setup.py: ``setup()`` with the version of this build and one
    placeholder abi3 extension (it marks the wheel binary; ``KernelBuildExt`` builds the real
    libraries). ``kwargs`` go to ``setup()``."""
    from setuptools import Extension, setup

    project = read_config(Path(os.getcwd()))
    options = build_options(project)
    setup(
        version=package_version(project, options, build_cuda_version(options)),
        ext_modules=[
            Extension(f"{project.package}.{project.library}", sources=[], py_limited_api=True)
        ],
        cmdclass={"build_ext": KernelBuildExt},
        options={"bdist_wheel": {"py_limited_api": "cp310"}},
        **kwargs,
    )
