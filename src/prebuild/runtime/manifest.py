"""The build manifests prebuild writes into wheels, and their one reader.

- ``Manifest`` (``prebuild/_manifest.json``), in prebuild's own stable-ABI wheels: package
  version, the CUDA version of the nvcc used, the SASS and PTX archs inside the CUDA
  library, the torch stable-ABI target, the flags, and the sha256 of each library. The build
  writes it (``Manifest.write``); the runtime loader and the inspection commands read it
  (``read_manifest``). ``selftest`` names the function returning the package's self-test
  cases (``prebuild selftest``), when the project declares one.
- ``ProjectManifest`` (``prebuild.json`` in the ``.dist-info`` directory), in wheels
  prebuild built of another project (``prebuild wheel --arch ... PROJECT``): the torch and
  CUDA it was built with, the archs read back from each library, and every nvcc call as the
  project gave it and as it was run. ``prebuild inspect``, ``install`` and ``doctor`` read it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .arch import Arch, ArchError, parse_arch
from .versions import is_version, minor, release

MANIFEST_NAME = "_manifest.json"
SCHEMA_VERSION = 1
PROJECT_MANIFEST_NAME = "prebuild.json"  # in a .dist-info directory


class ManifestError(ValueError):
    """The manifest is missing, unreadable, or does not describe the files beside it."""


@dataclass(frozen=True)
class Library:
    """One compiled library of the package. ``kind`` is ``"cpu"`` (schemas + CPU kernels,
    always loaded) or ``"cuda"`` (CUDA kernels, loaded when torch has CUDA)."""

    file: str  # file name inside the package directory
    kind: str
    sha256: str
    size: int | None = None  # bytes; None in manifests written before sizes were recorded


@dataclass(frozen=True)
class Manifest:
    package_version: str
    torch_target: str  # lowest torch the stable-ABI binary loads in, e.g. "2.13"
    built_with_torch: str  # torch whose headers were used, e.g. "2.13.0+cpu"
    cuda_version: str | None  # nvcc's CUDA version ("13.0"), None for a CPU-only build
    sass_archs: tuple[Arch, ...] = ()
    ptx_archs: tuple[Arch, ...] = ()
    libraries: tuple[Library, ...] = ()
    flags: dict[str, list[str]] = field(default_factory=dict)
    op_namespace: str = "prebuild"  # the torch.ops namespace the libraries register
    package: str = "prebuild"  # the import package the libraries belong to (named in errors)
    selftest: str | None = None  # "package.module:function" returning its SelftestCase list

    @property
    def has_cuda(self) -> bool:
        return any(lib.kind == "cuda" for lib in self.libraries)

    def library(self, kind: str) -> Library | None:
        return next((lib for lib in self.libraries if lib.kind == kind), None)

    def to_json(self) -> str:
        data = asdict(self)
        data["schema"] = SCHEMA_VERSION
        data["sass_archs"] = [a.sm for a in self.sass_archs]
        data["ptx_archs"] = [a.compute for a in self.ptx_archs]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            data = json.loads(text)
            if data.get("schema") != SCHEMA_VERSION:
                raise ManifestError(
                    f"manifest schema {data.get('schema')!r} is not {SCHEMA_VERSION}"
                )
            manifest = cls(
                package_version=_version_text(data["package_version"], "package_version"),
                op_namespace=_identifier(data["op_namespace"], "op_namespace"),
                package=_package(data.get("package", "prebuild")),
                torch_target=_version_text(data["torch_target"], "torch_target"),
                built_with_torch=_version_text(data["built_with_torch"], "built_with_torch"),
                cuda_version=(
                    None
                    if data["cuda_version"] is None
                    else _version_text(data["cuda_version"], "cuda_version")
                ),
                sass_archs=tuple(parse_arch(a) for a in data["sass_archs"]),
                ptx_archs=tuple(parse_arch(a) for a in data["ptx_archs"]),
                libraries=tuple(
                    Library(
                        str(lib["file"]),
                        str(lib["kind"]),
                        str(lib["sha256"]),
                        _size(lib.get("size")),
                    )
                    for lib in data["libraries"]
                ),
                flags={str(k): [str(f) for f in v] for k, v in data.get("flags", {}).items()},
                # Absent from manifests written before hooks were recorded.
                selftest=None if data.get("selftest") is None else _hook(data["selftest"]),
            )
            if manifest.has_cuda and manifest.cuda_version is None:
                raise ValueError("a CUDA library is listed but no cuda_version")
            return manifest
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, ArchError) as exc:
            raise ManifestError(f"manifest is malformed: {exc!r}") from exc

    def write(self, directory: Path) -> Path:
        path = Path(directory) / MANIFEST_NAME
        path.write_text(self.to_json(), encoding="utf-8")
        return path


def _version_text(value: object, key: str) -> str:
    """A version string (``"2.13"``, ``"2.13.0+cpu"``)."""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a version string, got {value!r}")
    if not is_version(value):
        raise ValueError(f"{key} is not a version: {value!r}")
    return value


def _size(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a library size must be a byte count, got {value!r}")
    return value


def _package(value: object) -> str:
    if not isinstance(value, str) or not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"package must be a dotted Python name, got {value!r}")
    return value


def split_hook(value: object) -> tuple[str, str]:
    """A self-test hook reference, ``"package.module:function"``, as (module, function);
    ValueError saying what a hook reference is for anything else."""
    module, colon, function = value.partition(":") if isinstance(value, str) else ("", "", "")
    if (
        not colon
        or not all(part.isidentifier() for part in module.split("."))
        or not function.isidentifier()
    ):
        raise ValueError(
            f"a selftest hook is 'package.module:function' (a dotted module path, a colon, "
            f"an identifier), got {value!r}"
        )
    return module, function


def _hook(value: object) -> str:
    split_hook(value)
    return str(value)


def _identifier(value: object, key: str) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise ValueError(f"{key} must be an identifier, got {value!r}")
    return value


def read_manifest(directory: Path) -> Manifest:
    """Read the manifest in ``directory``; ManifestError when it is absent or malformed."""
    path = Path(directory) / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"{path} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}") from exc
    return Manifest.from_json(text)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def library_path(directory: Path, library: Library) -> Path:
    """Where ``library`` lives: strictly inside ``directory`` (a manifest cannot point out)."""
    name = library.file
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ManifestError(f"library name {name!r} in the manifest is not a plain file name")
    return Path(directory) / name


def _present(directory: Path, library: Library) -> Path:
    path = library_path(directory, library)
    if not path.is_file():
        raise ManifestError(f"{path.name} is listed in the manifest but missing")
    return path


def _check_sha256(path: Path, library: Library) -> None:
    actual = sha256_file(path)
    if actual != library.sha256:
        raise ManifestError(
            f"{path.name} does not match the manifest (sha256 {actual[:12]}..., "
            f"expected {library.sha256[:12]}...): the file is damaged or was replaced"
        )


def check_libraries(directory: Path, manifest: Manifest) -> None:
    """The check made at every import: each library present with its recorded size (one
    ``stat``, whatever its size), which catches a missing, truncated or partly copied file.
    A manifest without sizes (older builds) gets the full sha256 check instead. The sha256
    of every byte is ``verify_libraries``' job (``prebuild doctor``, ``prebuild inspect``)."""
    for library in manifest.libraries:
        path = _present(directory, library)
        if library.size is None:
            _check_sha256(path, library)
            continue
        actual = path.stat().st_size
        if actual != library.size:
            raise ManifestError(
                f"{path.name} does not match the manifest ({actual} bytes, expected {library.size}): "
                "the file is truncated, damaged or was replaced"
            )


def verify_libraries(directory: Path, manifest: Manifest) -> None:
    """Check that each library the manifest lists is present and has the recorded sha256
    (and size, when recorded)."""
    check_libraries(directory, manifest)
    for library in manifest.libraries:
        if library.size is not None:  # check_libraries hashed the others already
            _check_sha256(_present(directory, library), library)


# --- another project's wheel ------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltLibrary:
    """One shared library of a project's wheel, with the archs read back from it."""

    file: str  # path inside the wheel, which is its path under site-packages ("pkg/_C.cpython-311-...so")
    sha256: str
    size: int
    sass: tuple[Arch, ...] = ()
    ptx: tuple[Arch, ...] = ()

    @property
    def has_code(self) -> bool:
        return bool(self.sass or self.ptx)


@dataclass(frozen=True)
class CompilerCall:
    """One call of nvcc (or the host compiler) by a classic project's build, through the shim."""

    given: tuple[str, ...]  # the arguments the project's build passed
    run: tuple[str, ...]  # the arguments the compiler ran with (nvcc: the requested archs only)


@dataclass(frozen=True)
class CxxStandard:
    """The C++ standard of a classic build: the oldest one torch's headers compile in (found
    by the build's preflight), and the standards the project asked nvcc (``raised``) and the
    host compiler (``raised_host``) for that were raised to it, each with how many calls asked
    for it."""

    needed: str  # "c++20"
    raised: tuple[tuple[str, int], ...] = ()  # (("c++17", 20),)
    raised_host: tuple[tuple[str, int], ...] = ()  # (("c++17", 2),)

    def to_dict(self) -> dict:
        return {
            "needed": self.needed,
            "raised": dict(self.raised),
            "raised_host": dict(self.raised_host),
        }

    @classmethod
    def from_dict(cls, data: dict) -> CxxStandard:
        def counts(key: str) -> tuple[tuple[str, int], ...]:
            return tuple((str(std), int(calls)) for std, calls in dict(data.get(key, {})).items())

        return cls(str(data["needed"]), counts("raised"), counts("raised_host"))


# What a classic wheel's libraries hold (ProjectManifest.code): GPU code for its archs, or no GPU
# code at all, in which case one wheel serves every GPU: host code calling CUDA (torch_memory_saver:
# the driver's memory API), or CPU code only (torch-sparse-solve: SuiteSparse's KLU).
GPU_CODE, CUDA_HOST_CODE, CPU_CODE = "gpu", "cuda-host", "cpu"
CODES = (GPU_CODE, CUDA_HOST_CODE, CPU_CODE)
# Which of torch's ABIs a classic wheel's libraries use (ProjectManifest.torch_abi): its C++ ABI,
# which holds within one minor release, or only the stable ABI's C shim, which every torch from
# the target on keeps (a setup.py project written against torch/csrc/stable), or none at all
# (libraries loaded by ctypes, or on Python's and CUDA's APIs alone: bitsandbytes,
# torch_memory_saver), which any torch leaves alone.
CXX_ABI, STABLE_ABI, NO_TORCH_ABI = "cxx", "stable", "none"
TORCH_ABIS = (CXX_ABI, STABLE_ABI, NO_TORCH_ABI)


@dataclass(frozen=True)
class ProjectManifest:
    """What prebuild built of another project; ``kind`` is ``"classic"`` (torch/extension.h,
    tied to one torch minor release)."""

    kind: str
    torch: str  # the torch it was built against, "2.14.1+cu130"
    torch_cuda: str | None  # that torch's CUDA, "13.0"
    cuda: str  # nvcc's CUDA version
    python_tag: str  # "cp311-cp311-linux_x86_64"
    sass_archs: tuple[Arch, ...]
    ptx_archs: tuple[Arch, ...]
    libraries: tuple[BuiltLibrary, ...]
    nvcc_calls: tuple[CompilerCall, ...] = ()
    cxx_standard: CxxStandard | None = None
    built_by: str = "prebuild"
    code: str = GPU_CODE  # GPU_CODE, CUDA_HOST_CODE or CPU_CODE
    # what its libraries link that neither the wheel, torch nor the C/C++ runtimes provide
    system_libraries: tuple[str, ...] = ()
    # the build machine's libraries copied into the wheel (their names there: libklu.so.2)
    bundled_libraries: tuple[str, ...] = ()
    torch_abi: str = CXX_ABI  # one of TORCH_ABIS
    torch_target: str | None = None  # STABLE_ABI's: the oldest torch it loads in, "2.10"
    # the changes prebuild made to the project's code to build it (api_mends.py): "a.cu:80: ..."
    source_changes: tuple[str, ...] = ()

    @property
    def torch_minor(self) -> str:
        """``"2.14"``: the release it was built against (the one a C++-ABI wheel needs)."""
        return minor(self.torch)

    @property
    def stable_abi(self) -> bool:
        """Its libraries use only torch's stable ABI: every torch from ``torch_target`` on."""
        return self.torch_abi == STABLE_ABI

    @property
    def torch_free(self) -> bool:
        """Its libraries call nothing of torch's: any torch release serves them."""
        return self.torch_abi == NO_TORCH_ABI

    @property
    def torch_needed(self) -> str:
        """For messages: ``2.14`` (its minor release alone), ``>= 2.10`` (the stable ABI) or
        ``of any release`` (no torch ABI)."""
        if self.torch_free:
            return "of any release"
        return f">= {self.torch_target}" if self.stable_abi else self.torch_minor

    @property
    def abi_name(self) -> str | None:
        """For messages: ``the stable ABI``, ``no torch ABI``; None for torch's C++ ABI."""
        if self.torch_free:
            return "no torch ABI"
        return "the stable ABI" if self.stable_abi else None

    @property
    def torch_spec(self) -> str:
        """The pip specifier of the torch it needs: ``==2.14.*``, ``>=2.10`` or "" (any)."""
        if self.torch_free:
            return ""
        return f">={self.torch_target}" if self.stable_abi else f"=={self.torch_minor}.*"

    def torch_fits(self, torch_version: str) -> bool:
        """Whether its libraries link against ``torch_version``'s: the same minor release, the
        target or a newer one for the stable ABI, any for a wheel that calls nothing of torch's."""
        have = release(torch_version)[:2]
        if self.torch_free:
            return True
        if self.stable_abi:
            return have >= release(self.torch_target or self.torch)[:2]
        return have == release(self.torch)[:2]

    @property
    def host_only(self) -> bool:
        """No GPU code in it: it runs on every GPU, none is checked."""
        return self.code != GPU_CODE

    @property
    def needs_cuda(self) -> bool:
        """Its libraries need torch's CUDA libraries (a CUDA build of torch, a driver)."""
        return self.code != CPU_CODE

    def holds(self) -> str:
        """What it holds, for messages: ``sm_90, compute_90``, ``CUDA host code (no GPU code)``."""
        if self.code == CUDA_HOST_CODE:
            return "CUDA host code (no GPU code)"
        if self.code == CPU_CODE:
            return "CPU code only"
        return ", ".join([a.sm for a in self.sass_archs] + [a.compute for a in self.ptx_archs])

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "kind": self.kind,
            "built_by": self.built_by,
            "code": self.code,
            "torch": self.torch,
            "torch_cuda": self.torch_cuda,
            "cuda": self.cuda,
            "python_tag": self.python_tag,
            "sass_archs": [a.sm for a in self.sass_archs],
            "ptx_archs": [a.compute for a in self.ptx_archs],
            "libraries": [
                {
                    "file": lib.file,
                    "sha256": lib.sha256,
                    "size": lib.size,
                    "sass": [a.sm for a in lib.sass],
                    "ptx": [a.compute for a in lib.ptx],
                }
                for lib in self.libraries
            ],
            "nvcc_calls": [{"given": list(c.given), "run": list(c.run)} for c in self.nvcc_calls],
            "cxx_standard": self.cxx_standard.to_dict() if self.cxx_standard else None,
            "system_libraries": list(self.system_libraries),
            "bundled_libraries": list(self.bundled_libraries),
            "torch_abi": self.torch_abi,
            "torch_target": self.torch_target,
            "source_changes": list(self.source_changes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ProjectManifest:
        try:
            data = json.loads(text)
            if data.get("schema") != SCHEMA_VERSION:
                raise ManifestError(
                    f"{PROJECT_MANIFEST_NAME} schema {data.get('schema')!r} is not {SCHEMA_VERSION}"
                )
            if data.get("kind") != "classic":
                raise ManifestError(
                    f"{PROJECT_MANIFEST_NAME} describes a {data.get('kind')!r} build, which this "
                    "prebuild does not know: upgrade prebuild"
                )
            code = data.get("code", GPU_CODE)  # manifests written before host wheels: GPU code
            if code not in CODES:
                raise ManifestError(
                    f"{PROJECT_MANIFEST_NAME} says its libraries hold {code!r}, which this "
                    "prebuild does not know: upgrade prebuild"
                )
            return cls(
                kind=data["kind"],
                built_by=str(data.get("built_by", "prebuild")),
                code=code,
                torch=_version_text(data["torch"], "torch"),
                torch_cuda=None
                if data["torch_cuda"] is None
                else _version_text(data["torch_cuda"], "torch_cuda"),
                cuda=_version_text(data["cuda"], "cuda"),
                python_tag=str(data["python_tag"]),
                sass_archs=tuple(parse_arch(a) for a in data["sass_archs"]),
                ptx_archs=tuple(parse_arch(a) for a in data["ptx_archs"]),
                libraries=tuple(
                    BuiltLibrary(
                        _relative_file(lib["file"]),
                        str(lib["sha256"]),
                        _size(lib["size"]) or 0,
                        tuple(parse_arch(a) for a in lib["sass"]),
                        tuple(parse_arch(a) for a in lib["ptx"]),
                    )
                    for lib in data["libraries"]
                ),
                nvcc_calls=tuple(
                    CompilerCall(tuple(map(str, c["given"])), tuple(map(str, c["run"])))
                    for c in data.get("nvcc_calls", [])
                ),
                cxx_standard=CxxStandard.from_dict(data["cxx_standard"])
                if data.get("cxx_standard")
                else None,
                # manifests written before it: none recorded
                system_libraries=tuple(str(n) for n in data.get("system_libraries", [])),
                bundled_libraries=tuple(str(n) for n in data.get("bundled_libraries", [])),
                source_changes=tuple(str(c) for c in data.get("source_changes", [])),
                **_torch_abi(data),
            )
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, ArchError) as exc:
            raise ManifestError(f"{PROJECT_MANIFEST_NAME} is malformed: {exc!r}") from exc


def _torch_abi(data: dict) -> dict:
    """A manifest's torch ABI and target (manifests written before it: the C++ ABI)."""
    abi = data.get("torch_abi", CXX_ABI)
    if abi not in TORCH_ABIS:
        raise ManifestError(
            f"{PROJECT_MANIFEST_NAME} says its libraries use torch's {abi!r} ABI, which this "
            "prebuild does not know: upgrade prebuild"
        )
    if abi != STABLE_ABI:
        return {"torch_abi": abi}
    return {"torch_abi": abi, "torch_target": _version_text(data["torch_target"], "torch_target")}


def _relative_file(value: object) -> str:
    """A path inside a wheel: relative, no ``..`` (a manifest cannot point outside)."""
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"library path {value!r} is not a relative path inside the wheel")
    return value
