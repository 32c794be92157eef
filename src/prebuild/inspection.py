"""What a wheel or a compiled library really contains, compared with its manifest.

The manifest says which archs a wheel was built for; this module reads the binaries
themselves: the ELF ``.nv_fatbin`` section (pyelftools) parsed by ``prebuild.fatbin``. It is
the one way the project asks "which archs are inside": ``prebuild inspect`` and the check
``prebuild wheel`` runs before a wheel is written both use it (cuobjdump only cross-checks
it, in the tests).

``compare`` is pure (a manifest and what was found in, disagreements out); the rest reads
files.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from prebuild.fatbin import EmbeddedCode, FatbinError, parse_fatbin, summarize
from prebuild.manifest import MANIFEST_NAME, Manifest, ManifestError, read_manifest

FATBIN_SECTION = ".nv_fatbin"
PACKAGE_DIR = "prebuild"


class InspectionError(ValueError):
    """The path cannot be inspected: missing, not a wheel, directory or ELF library."""


def library_code(data: bytes, name: str = "library") -> EmbeddedCode:
    """The archs inside one ELF shared library, given as bytes (no fatbin: no GPU code)."""
    try:
        section = ELFFile(io.BytesIO(data)).get_section_by_name(FATBIN_SECTION)
        if section is None:
            return EmbeddedCode()
        return summarize(parse_fatbin(section.data()))
    except ELFError as exc:
        raise InspectionError(f"{name} is not an ELF library: {exc}") from exc
    except FatbinError as exc:
        raise InspectionError(f"{name}: its {FATBIN_SECTION} section is malformed: {exc}") from exc


@dataclass(frozen=True)
class FoundLibrary:
    file: str
    sha256: str
    code: EmbeddedCode
    size: int | None = None


@dataclass(frozen=True)
class Disagreement:
    """``what`` is ``"file"`` (missing, unlisted, altered) or ``"archs"``."""

    what: str
    file: str
    message: str


def compare(manifest: Manifest, found: list[FoundLibrary], complete: bool = True) -> list[Disagreement]:
    """Every way the libraries found differ from what the manifest records.

    The CUDA library must hold exactly the manifest's SASS and PTX archs (code of statically
    linked libraries aside); any other library no GPU code. ``complete``: ``found`` is every
    library there is, so a library absent from the manifest is a disagreement too.
    """
    by_file = {lib.file: lib for lib in found}
    out: list[Disagreement] = []
    for listed in manifest.libraries:
        lib = by_file.get(listed.file)
        if lib is None:
            out.append(Disagreement("file", listed.file, "listed in the manifest but missing"))
            continue
        if lib.sha256 != listed.sha256:
            out.append(Disagreement("file", listed.file,
                                    f"sha256 {lib.sha256[:12]}... is not the manifest's "
                                    f"{listed.sha256[:12]}...: altered or replaced"))  # fmt: skip
        if listed.size is not None and lib.size is not None and lib.size != listed.size:
            out.append(Disagreement("file", listed.file, f"{lib.size} bytes, the manifest says {listed.size}"))
        want_sass = manifest.sass_archs if listed.kind == "cuda" else ()
        want_ptx = manifest.ptx_archs if listed.kind == "cuda" else ()
        if lib.code.sass != want_sass:
            out.append(Disagreement("archs", listed.file,
                                    f"SASS {_names(lib.code.sass, 'sm')} inside, manifest says "
                                    f"{_names(want_sass, 'sm')}"))  # fmt: skip
        if lib.code.ptx != want_ptx:
            out.append(Disagreement("archs", listed.file,
                                    f"PTX {_names(lib.code.ptx, 'compute')} inside, manifest "
                                    f"says {_names(want_ptx, 'compute')}"))  # fmt: skip
    if complete:
        listed_files = {lib.file for lib in manifest.libraries}
        for lib in found:
            if lib.file not in listed_files:
                out.append(Disagreement("file", lib.file, "a library the manifest does not list"))
    return out


def _names(archs, attr: str) -> str:
    return "[" + ", ".join(getattr(a, attr) for a in archs) + "]" if archs else "none"


@dataclass
class Report:
    target: Path
    manifest: Manifest | None
    libraries: list[FoundLibrary] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def kind_of(self, file: str) -> str | None:
        listed = next((lib for lib in self.manifest.libraries if lib.file == file), None) if self.manifest else None
        return listed.kind if listed else None

    def to_dict(self) -> dict:
        m = self.manifest
        return {
            "target": str(self.target),
            "ok": self.ok,
            "manifest": None if m is None else {
                "package_version": m.package_version, "cuda_version": m.cuda_version,
                "sass_archs": [a.sm for a in m.sass_archs], "ptx_archs": [a.compute for a in m.ptx_archs],
            },
            "libraries": [
                {"file": lib.file, "kind": self.kind_of(lib.file), "sha256": lib.sha256,
                 "sass": [a.sm for a in lib.code.sass], "ptx": [a.compute for a in lib.code.ptx],
                 "linked_sass": [a.sm for a in lib.code.linked_sass]}
                for lib in self.libraries
            ],
            "disagreements": [{"what": d.what, "file": d.file, "message": d.message} for d in self.disagreements],
        }  # fmt: skip


def found_library(name: str, data: bytes) -> FoundLibrary:
    """One library's sha256, archs and size, from its bytes (the one reader of libraries)."""
    return FoundLibrary(name, hashlib.sha256(data).hexdigest(), library_code(data, name), len(data))


def inspect_wheel(wheel: Path) -> Report:
    """Every library under ``prebuild/`` in a wheel, against the wheel's manifest."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InspectionError(f"{wheel} is not a readable wheel: {exc}") from exc
    with zf:
        try:
            manifest = Manifest.from_json(zf.read(f"{PACKAGE_DIR}/{MANIFEST_NAME}").decode())
        except KeyError as exc:
            raise ManifestError(f"{wheel.name} has no {PACKAGE_DIR}/{MANIFEST_NAME}") from exc
        found = [
            found_library(Path(name).name, zf.read(name))
            for name in sorted(zf.namelist())
            if name.startswith(f"{PACKAGE_DIR}/") and name.count("/") == 1 and name.endswith(".so")
        ]
    return Report(wheel, manifest, found, compare(manifest, found))


def inspect_directory(directory: Path) -> Report:
    """An installed (or in-place) package directory holding ``_manifest.json``."""
    manifest = read_manifest(directory)
    found = [found_library(p.name, p.read_bytes()) for p in sorted(directory.glob("*.so")) if p.is_file()]
    return Report(directory, manifest, found, compare(manifest, found))


def inspect_library(library: Path) -> Report:
    """One library; compared with a ``_manifest.json`` beside it when one lists it."""
    found = [found_library(library.name, library.read_bytes())]
    manifest_path = library.parent / MANIFEST_NAME
    if not manifest_path.is_file():
        return Report(library, None, found)
    full = read_manifest(library.parent)
    listed = [lib for lib in full.libraries if lib.file == library.name]
    if not listed:
        return Report(library, full, found, [Disagreement("file", library.name,
                                                          "the manifest beside it does not list it")])  # fmt: skip
    manifest = replace(full, libraries=tuple(listed))
    return Report(library, full, found, compare(manifest, found))


def inspect_path(path: Path) -> Report:
    """A wheel (``.whl``), a package directory, or one library; InspectionError or
    ManifestError when it cannot be read."""
    path = Path(path)
    if not path.exists():
        raise InspectionError(f"{path} does not exist")
    if path.is_dir():
        return inspect_directory(path)
    if path.suffix == ".whl":
        return inspect_wheel(path)
    return inspect_library(path)


def read_wheel_manifest(wheel: Path) -> Manifest:
    """The manifest inside a wheel, after checking that every listed library is there with
    its recorded sha256 (ManifestError otherwise)."""
    report = inspect_wheel(wheel)
    problems = [d for d in report.disagreements if d.what == "file"]
    if problems:
        raise ManifestError(f"{wheel.name}: " + "; ".join(f"{d.file}: {d.message}" for d in problems))
    assert report.manifest is not None
    return report.manifest
