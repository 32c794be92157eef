"""The setuptools side of the build: a ``build_ext`` that compiles with ninja and nvcc.

torch's ``BuildExtension`` refuses to compile CUDA when the installed torch is a CPU build
and gives no per-arch control, so this command drives the compilers itself (through
``prebuild.tool.builder.compile``) and then places the libraries and the manifest in the package.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools.command.build_ext import build_ext

from prebuild._version import BASE_VERSION
from prebuild.tool.builder import flags as F
from prebuild.tool.builder.compile import CUDA_LIBRARY, SIMT_LIBRARY, compile_libraries
from prebuild.tool.builder.toolchain import Nvcc, find_nvcc
from prebuild.runtime.manifest import Library, Manifest, sha256_file

SOURCE_DIR = Path(__file__).resolve().parents[4]


def package_version(options: F.BuildOptions | None = None) -> str:
    """``0.1.0+cu130.sm80`` for the arch set being built, ``0.1.0+cpu`` without CUDA."""
    options = options or F.BuildOptions.from_env()
    cuda = Nvcc(find_nvcc()).version if options.cuda else None
    return f"{BASE_VERSION}+{F.local_version_label(cuda, options.archs, options.ptx_archs)}"


def _print_progress(done: int, total: int, what: str) -> None:
    print(f"prebuild: [{done}/{total}] {what}", file=sys.stderr, flush=True)


def _manifest_flags(flags: dict[str, list[str]]) -> dict[str, list[str]]:
    # Include paths name the build machine's directories: not part of what was built.
    return {k: [f for f in v if not f.startswith("-I")] for k, v in flags.items()}


class PrebuildBuildExt(build_ext):
    """Compiles the libraries, then copies them with a manifest into the package."""

    def run(self) -> None:
        options = F.BuildOptions.from_env()
        compiled = compile_libraries(SOURCE_DIR, options, on_progress=_print_progress)
        package_dir = Path(self.get_ext_fullpath("prebuild._C")).parent
        package_dir.mkdir(parents=True, exist_ok=True)

        built = [(compiled.cpu_library, "cpu")]
        for path, kind, name in (
            (compiled.cuda_library, "cuda", CUDA_LIBRARY),
            (compiled.simt_library, "simt", SIMT_LIBRARY),
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
            package_version=package_version(options),
            op_namespace=F.OP_NAMESPACE,
            torch_target=str(F.TORCH_TARGET),
            built_with_torch=compiled.torch.version_string,
            cuda_version=compiled.cuda_version,
            sass_archs=options.archs if compiled.cuda_library else (),
            ptx_archs=options.ptx_archs if compiled.cuda_library else (),
            libraries=tuple(libraries),
            flags=_manifest_flags(compiled.flags),
        ).write(package_dir)
        self._outputs = [package_dir / "_manifest.json"] + [package_dir / p.name for p, _ in built]

    def get_outputs(self) -> list[str]:
        return [str(p) for p in getattr(self, "_outputs", [])]
