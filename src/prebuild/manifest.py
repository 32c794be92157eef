"""The build manifest (``prebuild/_manifest.json``) that every wheel carries.

It records what was compiled and how: package version, the CUDA version of the nvcc used,
the SASS and PTX archs inside the CUDA library, the torch stable-ABI target, the flags, and
the sha256 of each compiled library. The build writes it (``Manifest.write``); the runtime
loader and the inspection commands read it (``read_manifest``): this is the one reader.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from prebuild.arch import Arch, ArchError, parse_arch

MANIFEST_NAME = "_manifest.json"
SCHEMA_VERSION = 1


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
    def from_json(cls, text: str) -> "Manifest":
        try:
            data = json.loads(text)
            if data.get("schema") != SCHEMA_VERSION:
                raise ManifestError(
                    f"manifest schema {data.get('schema')!r} is not {SCHEMA_VERSION}"
                )
            manifest = cls(
                package_version=_version_text(data["package_version"], "package_version"),
                op_namespace=_identifier(data["op_namespace"], "op_namespace"),
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
                    Library(str(lib["file"]), str(lib["kind"]), str(lib["sha256"]), _size(lib.get("size")))
                    for lib in data["libraries"]
                ),
                flags={str(k): [str(f) for f in v] for k, v in data.get("flags", {}).items()},
            )
            if manifest.has_cuda and manifest.cuda_version is None:
                raise ValueError("a CUDA library is listed but no cuda_version")
            return manifest
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, ArchError, InvalidVersion) as exc:
            raise ManifestError(f"manifest is malformed: {exc!r}") from exc

    def write(self, directory: Path) -> Path:
        path = Path(directory) / MANIFEST_NAME
        path.write_text(self.to_json(), encoding="utf-8")
        return path


def _version_text(value: object, key: str) -> str:
    """A version string that packaging can parse (``"2.13"``, ``"2.13.0+cpu"``)."""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a version string, got {value!r}")
    try:
        Version(value)
    except InvalidVersion as exc:
        raise ValueError(f"{key} is not a version: {value!r}") from exc
    return value


def _size(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a library size must be a byte count, got {value!r}")
    return value


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
