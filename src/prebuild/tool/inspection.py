"""What a wheel or a compiled library really contains, compared with its manifest.

The manifest says which archs a wheel was built for; this module reads the binaries
themselves: the ELF ``.nv_fatbin`` section (pyelftools) parsed by ``prebuild.tool.fatbin``. It is
the one way the project asks "which archs are inside": ``prebuild inspect`` and the checks
``prebuild wheel`` runs before a wheel is written use it (cuobjdump only cross-checks it, in
the tests). Both manifests are understood: prebuild's own (``prebuild/_manifest.json``) and
the one of another project's wheel (``.dist-info/prebuild.json``), in a wheel file or in an
installed distribution.

``compare`` is pure (a manifest and what was found in, disagreements out); the rest reads
files.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import shutil
import struct
import subprocess
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from prebuild.runtime.c_runtimes import combined, newest
from prebuild.runtime.manifest import (
    MANIFEST_NAME,
    PROJECT_MANIFEST_NAME,
    BuiltLibrary,
    Manifest,
    ManifestError,
    ProjectManifest,
    read_manifest,
)
from prebuild.tool.fatbin import EmbeddedCode, FatbinError, embedded_code, parse_fatbin
from prebuild.tool.variant_wheels import (
    VARIANT_JSON,
    VariantError,
    WheelArchs,
    archs_of,
    parse_label,
    split_filename,
)

FATBIN_SECTION = ".nv_fatbin"
AnyManifest = Manifest | ProjectManifest


class InspectionError(ValueError):
    """The path cannot be inspected: missing, not a wheel, directory or ELF library."""


def library_code(data: bytes, name: str = "library") -> EmbeddedCode:
    """The archs inside one ELF shared library, given as bytes (no fatbin: no GPU code)."""
    try:
        section = ELFFile(io.BytesIO(data)).get_section_by_name(FATBIN_SECTION)
        if section is None:
            return EmbeddedCode()
        return embedded_code(parse_fatbin(section.data()))
    except ELFError as exc:
        raise InspectionError(f"{name} is not an ELF library: {exc}") from exc
    except FatbinError as exc:
        raise InspectionError(f"{name}: its {FATBIN_SECTION} section is malformed: {exc}") from exc


def exports_symbol(data: bytes, symbol: str) -> bool:
    """Whether an ELF library exports ``symbol`` (``PyInit_<name>``: it is a Python extension
    module, not a plain shared library)."""
    return symbol in dynamic_symbols(data)[0]


def dynamic_symbols(data: bytes | BinaryIO) -> tuple[frozenset[str], frozenset[str]]:
    """The names an ELF library (its bytes, or an open file: only its symbol table is read)
    defines for others and those it needs from others (its dynamic symbols, without their
    version: ``aoti_torch_get_numel``, ``_ZN3c105ErrorC2E...``); empty if it is not ELF."""
    try:
        stream = io.BytesIO(data) if isinstance(data, bytes) else data
        elf = ELFFile(stream)
        table = elf.get_section_by_name(".dynsym")
        if table is None:
            return frozenset(), frozenset()
        strings = elf.get_section(table["sh_link"]).data()
        entries = table.data()
    except ELFError:
        return frozenset(), frozenset()
    # pyelftools finds the sections; the entries are unpacked in bulk (one Symbol object per
    # name made reading torch's 100k names take 3.5 s of every classic build, this 0.2 s).
    # Elf64_Sym: name, info, other, shndx, value, size; Elf32_Sym: name, value, size, info,
    # other, shndx. The name is an offset into the string table; shndx 0 (SHN_UNDEF): undefined.
    order = "<" if elf.little_endian else ">"
    if elf.elfclass == 64:
        layout, shndx_at = order + "IBBHQQ", 3
    else:
        layout, shndx_at = order + "IIIBBH", 5
    size = struct.calcsize(layout)
    defined, undefined = set(), set()
    for entry in struct.iter_unpack(layout, entries[: len(entries) // size * size]):
        start = entry[0]
        end = strings.find(b"\0", start)
        if name := strings[start : end if end >= 0 else None].decode("utf-8", "replace"):
            (undefined if entry[shndx_at] == 0 else defined).add(name)
    return frozenset(defined), frozenset(undefined)


@functools.cache  # a build's wheels ask it of the same torch
def folder_exports(folder: Path) -> frozenset[str]:
    """The names the shared libraries of ``folder`` export (torch's ``lib``: 100k names of
    1 GB of libraries, read from their symbol tables alone)."""
    names: set[str] = set()
    for path in sorted(folder.glob("*.so*")):
        if path.is_file():
            with path.open("rb") as f:
                names |= dynamic_symbols(f)[0]
    return frozenset(names)


def demangled(names: Iterable[str]) -> dict[str, str]:
    """Each C++ name as ``c++filt`` (binutils) writes it, as it is where c++filt is not
    installed or fails."""
    names = list(names)
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {n: n for n in names}
    try:
        out = subprocess.run(
            [tool], input="\n".join(names), capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        out = []
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def undefined_symbols(data: bytes) -> frozenset[str]:
    """The names an ELF library needs from others (``dynamic_symbols``)."""
    return dynamic_symbols(data)[1]


def needed_libraries(data: bytes) -> tuple[str, ...]:
    """The libraries an ELF library names as needed (its DT_NEEDED entries), in order; () if
    it is not ELF or has no dynamic section."""
    return _dynamic_names(data, "DT_NEEDED", "needed")


def soname(data: bytes) -> str | None:
    """The name an ELF library gives itself (its DT_SONAME, what the libraries linking it
    need); None if it is not ELF or gives none."""
    names = _dynamic_names(data, "DT_SONAME", "soname")
    return names[0] if names else None


def runtime_needs(library: bytes | BinaryIO) -> dict[str, str]:
    """The C and C++ runtime versions an ELF library needs (``{"GLIBC": "2.32", "GLIBCXX":
    "3.4.29"}``: the newest of each family its symbols reference, ``c_runtimes.newest``); {} if
    it is not ELF. ``library``: its bytes, or an open file (torch's, read without loading them)."""
    from elftools.elf.gnuversions import GNUVerNeedSection

    stream = io.BytesIO(library) if isinstance(library, bytes) else library
    try:
        return newest(
            aux.name
            for section in ELFFile(stream).iter_sections()
            if isinstance(section, GNUVerNeedSection)
            for _, auxiliaries in section.iter_versions()
            for aux in auxiliaries
        )
    except ELFError:
        return {}


def _dynamic_names(data: bytes, tag_name: str, attribute: str) -> tuple[str, ...]:
    from elftools.elf.dynamic import DynamicSection

    try:
        return tuple(
            getattr(tag, attribute)
            for section in ELFFile(io.BytesIO(data)).iter_sections()
            if isinstance(section, DynamicSection)
            for tag in section.iter_tags()
            if tag.entry.d_tag == tag_name
        )
    except ELFError:
        return ()


@dataclass(frozen=True)
class FoundLibrary:
    file: str
    sha256: str
    code: EmbeddedCode
    size: int | None = None
    # the C and C++ runtime versions it needs (runtime_needs)
    runtime: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Disagreement:
    """``what`` is ``"file"`` (missing, unlisted, altered) or ``"archs"``."""

    what: str
    file: str
    message: str


@dataclass(frozen=True)
class Expected:
    """What a manifest says of one library. ``all_sass``: every SASS entry counts, not only
    those named after a source file (see ``built_library``)."""

    file: str
    kind: str  # "cpu"/"cuda" (prebuild's own), "cuda"/"host" (another project's)
    sha256: str
    size: int | None
    sass: tuple
    ptx: tuple
    all_sass: bool = False


def expected_libraries(manifest: AnyManifest) -> list[Expected]:
    """Pure: each library a manifest lists, with the archs it must hold."""
    if isinstance(manifest, ProjectManifest):
        return [
            Expected(
                lib.file,
                "cuda" if lib.has_code else "host",
                lib.sha256,
                lib.size,
                lib.sass,
                lib.ptx,
                True,
            )
            for lib in manifest.libraries
        ]
    return [
        Expected(
            lib.file,
            lib.kind,
            lib.sha256,
            lib.size,
            manifest.sass_archs if lib.kind == "cuda" else (),
            manifest.ptx_archs if lib.kind == "cuda" else (),
        )
        for lib in manifest.libraries
    ]


def built_library(lib: FoundLibrary) -> BuiltLibrary:
    """A library of another project's wheel as its manifest records it. All SASS counts:
    fatbin entries carry a source name only with -lineinfo or -G, so the named/unnamed split
    that sets a static CUDA runtime's kernels apart means nothing there (torch extensions
    link the CUDA runtime dynamically)."""
    sass = tuple(sorted({*lib.code.sass, *lib.code.linked_sass}))
    return BuiltLibrary(lib.file, lib.sha256, lib.size or 0, sass, lib.code.ptx)


def compare(
    manifest: AnyManifest, found: list[FoundLibrary], complete: bool = True
) -> list[Disagreement]:
    """Every way the libraries found differ from what the manifest records.

    Each library must hold exactly the archs the manifest gives it: for prebuild's own, the
    manifest's SASS and PTX in the CUDA library (code of statically linked libraries aside)
    and none in the others; for another project's, the archs recorded per library.
    ``complete``: ``found`` is every library there is, so a library absent from the manifest
    is a disagreement too.
    """
    by_file = {lib.file: lib for lib in found}
    out: list[Disagreement] = []
    expected = expected_libraries(manifest)
    for listed in expected:
        lib = by_file.get(listed.file)
        if lib is None:
            out.append(Disagreement("file", listed.file, "listed in the manifest but missing"))
            continue
        if lib.sha256 != listed.sha256:
            out.append(
                Disagreement(
                    "file",
                    listed.file,
                    f"sha256 {lib.sha256[:12]}... is not the manifest's "
                    f"{listed.sha256[:12]}...: altered or replaced",
                )
            )
        if listed.size is not None and lib.size is not None and lib.size != listed.size:
            out.append(
                Disagreement(
                    "file", listed.file, f"{lib.size} bytes, the manifest says {listed.size}"
                )
            )
        sass = built_library(lib).sass if listed.all_sass else lib.code.sass
        if sass != tuple(listed.sass):
            out.append(
                Disagreement(
                    "archs",
                    listed.file,
                    f"SASS {_names(sass, 'sm')} inside, manifest says {_names(listed.sass, 'sm')}",
                )
            )
        if lib.code.ptx != tuple(listed.ptx):
            out.append(
                Disagreement(
                    "archs",
                    listed.file,
                    f"PTX {_names(lib.code.ptx, 'compute')} inside, manifest "
                    f"says {_names(listed.ptx, 'compute')}",
                )
            )
    if complete:
        listed_files = {lib.file for lib in expected}
        for lib in found:
            if lib.file not in listed_files:
                out.append(Disagreement("file", lib.file, "a library the manifest does not list"))
    return out


def variant_disagreements(
    document: dict, label: str | None, manifest: AnyManifest
) -> list[Disagreement]:
    """Every way a variant wheel's ``variant.json`` differs from its name's label and from the
    archs its manifest records (which ``compare`` checked against the binaries)."""
    variants = document.get("variants") if isinstance(document, dict) else None
    if not isinstance(variants, dict) or len(variants) != 1:
        return [Disagreement("variant", VARIANT_JSON, "does not hold exactly one variant")]
    ((own, props),) = variants.items()
    out = []
    if label is not None and own != label:
        out.append(
            Disagreement(
                "variant", VARIANT_JSON, f"names the variant {own!r}, the file name {label!r}"
            )
        )
    try:
        said = archs_of(props)
        named = parse_label(own)
    except VariantError as exc:
        return [*out, Disagreement("variant", VARIANT_JSON, str(exc))]
    built = WheelArchs(tuple(manifest.sass_archs), tuple(manifest.ptx_archs))
    for what, archs in (("its sm_arch properties", said), (f"its label {own!r}", named)):
        if archs != built:
            out.append(
                Disagreement(
                    "variant",
                    VARIANT_JSON,
                    f"{what} say SASS {_names(archs.sass, 'sm')}, PTX {_names(archs.ptx, 'compute')}; "
                    f"the binaries hold SASS {_names(built.sass, 'sm')}, PTX {_names(built.ptx, 'compute')}",
                )
            )
    return out


def _names(archs, attr: str) -> str:
    return "[" + ", ".join(getattr(a, attr) for a in archs) + "]" if archs else "none"


@dataclass
class Report:
    target: Path
    manifest: AnyManifest | None
    libraries: list[FoundLibrary] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    project: str = ""  # the distribution's name and version, for another project's
    version: str = ""
    variant: dict | None = None  # a PEP 825 variant wheel's variant.json

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def kind_of(self, file: str) -> str | None:
        listed = (
            [e for e in expected_libraries(self.manifest) if e.file == file]
            if self.manifest
            else []
        )
        return listed[0].kind if listed else None

    def code_of(self, lib: FoundLibrary) -> EmbeddedCode:
        """The archs to show for a library: in another project's, all SASS is its own
        (see ``built_library``), none "linked"."""
        if isinstance(self.manifest, ProjectManifest):
            return EmbeddedCode(built_library(lib).sass, lib.code.ptx)
        return lib.code

    @property
    def runtime(self) -> dict[str, str]:
        """The C and C++ runtime versions its libraries need together."""
        return combined(*(lib.runtime for lib in self.libraries))

    @property
    def variant_label(self) -> str | None:
        """The PEP 825 variant this is (its variant.json's one label), None for another wheel."""
        return next(iter((self.variant or {}).get("variants", {})), None)

    @property
    def variant_text(self) -> str:
        """``sm80: nvidia :: cuda_version_lower_bound :: 13.0, nvidia :: sm_arch :: 80_real``."""
        entries = (self.variant or {}).get("variants", {})
        return "; ".join(
            f"{label}: "
            + ", ".join(
                f"{ns} :: {feature} :: {value}"
                for ns, features in sorted(props.items())
                for feature, values in sorted(features.items())
                for value in values
            )
            for label, props in entries.items()
        )

    @property
    def summary(self) -> str:
        """One line: what was built, for which archs, against which torch and CUDA."""
        m = self.manifest
        if m is None:
            return f"{self.target}: no manifest; showing what is inside only"
        archs = (
            f"SASS {', '.join(a.sm for a in m.sass_archs) or 'none'}, "
            f"PTX {', '.join(a.compute for a in m.ptx_archs) or 'none'}"
        )
        if isinstance(m, ProjectManifest):
            return (
                f"{self.project} {self.version}: a {m.kind} build by prebuild for torch "
                + (
                    f"{m.torch_needed} ({m.abi_name}, built with {m.torch})"
                    if m.abi_name
                    else f"{m.torch_minor} (built with {m.torch})"
                )
                + f", CUDA {m.cuda}, {m.python_tag}; manifest: "
                + (f"{m.holds()}, for every GPU" if m.host_only else archs)
                + (
                    f"; carries the build machine's {', '.join(m.bundled_libraries)}"
                    if m.bundled_libraries
                    else ""
                )
                + (
                    f"; needs the system's {', '.join(m.system_libraries)}"
                    if m.system_libraries
                    else ""
                )
                + (
                    f"; its code changed by prebuild in {len(m.source_changes)} "
                    f"{'place' if len(m.source_changes) == 1 else 'places'} to build "
                    "(source_changes)"
                    if m.source_changes
                    else ""
                )
            )
        return (
            f"{m.package} {m.package_version}, CUDA {m.cuda_version or 'none'}; manifest: {archs}"
        )

    def to_dict(self) -> dict:
        m = self.manifest
        if m is None:
            about = None
        elif isinstance(m, ProjectManifest):
            about = {
                "kind": m.kind,
                "project": self.project,
                "version": self.version,
                "torch": m.torch,
                "torch_cuda": m.torch_cuda,
                "cuda_version": m.cuda,
                "python_tag": m.python_tag,
                "code": m.code,
                "sass_archs": [a.sm for a in m.sass_archs],
                "ptx_archs": [a.compute for a in m.ptx_archs],
                "system_libraries": list(m.system_libraries),
                "bundled_libraries": list(m.bundled_libraries),
                "source_changes": list(m.source_changes),
                "torch_abi": m.torch_abi,
                "torch_target": m.torch_target,
            }
        else:
            about = {
                "kind": "prebuild",
                "package_version": m.package_version,
                "cuda_version": m.cuda_version,
                "sass_archs": [a.sm for a in m.sass_archs],
                "ptx_archs": [a.compute for a in m.ptx_archs],
            }
        return {
            "target": str(self.target),
            "ok": self.ok,
            "manifest": about,
            "runtime": self.runtime,
            "libraries": [
                {
                    "file": lib.file,
                    "kind": self.kind_of(lib.file),
                    "sha256": lib.sha256,
                    "sass": [a.sm for a in code.sass],
                    "ptx": [a.compute for a in code.ptx],
                    "linked_sass": [a.sm for a in code.linked_sass],
                    "runtime": lib.runtime,
                }
                for lib, code in ((lib, self.code_of(lib)) for lib in self.libraries)
            ],
            "disagreements": [
                {"what": d.what, "file": d.file, "message": d.message} for d in self.disagreements
            ],
            "variant": self.variant,
        }


def found_library(name: str, data: bytes) -> FoundLibrary:
    """One library's sha256, archs and size, from its bytes (the one reader of libraries)."""
    return FoundLibrary(
        name,
        hashlib.sha256(data).hexdigest(),
        library_code(data, name),
        len(data),
        runtime_needs(data),
    )


def is_shared_library(name: str) -> bool:
    return name.endswith(".so") or ".so." in Path(name).name


def package_manifests(names: list[str]) -> list[str]:
    """Pure: the ``_manifest.json`` files of a wheel's packages (a native project's wheel,
    prebuild's own among them: ``prebuild/_manifest.json``, ``my_kernels/_manifest.json``)."""
    return [
        n
        for n in names
        if n.endswith(f"/{MANIFEST_NAME}") and ".dist-info/" not in n and ".data/" not in n
    ]


def _manifest_path(names: list[str], wheel_name: str) -> str:
    """Where a wheel's manifest is: its native package's ``_manifest.json``, or its
    ``.dist-info/prebuild.json`` (another project's); ManifestError for neither or two."""
    native = package_manifests(names)
    if len(native) > 1:
        raise ManifestError(
            f"{wheel_name} holds {len(native)} package manifests ({', '.join(native)}): "
            "one wheel, one native package"
        )
    theirs = [
        n for n in names if n.count("/") == 1 and n.endswith(f".dist-info/{PROJECT_MANIFEST_NAME}")
    ]
    if not native and not theirs:
        raise ManifestError(
            f"{wheel_name} has no package {MANIFEST_NAME} and no .dist-info/{PROJECT_MANIFEST_NAME}: "
            "prebuild did not build it"
        )
    return native[0] if native else theirs[0]


def _read_manifest(zf: zipfile.ZipFile, path: str) -> AnyManifest:
    text = zf.read(path).decode()
    if path.endswith(f".dist-info/{PROJECT_MANIFEST_NAME}"):
        return ProjectManifest.from_json(text)
    return Manifest.from_json(text)


def wheel_manifest(wheel: Path) -> AnyManifest:
    """A wheel's manifest alone, its libraries not read (``inspect_wheel`` checks them)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return _read_manifest(zf, _manifest_path(sorted(zf.namelist()), wheel.name))
    except (OSError, zipfile.BadZipFile) as exc:
        raise InspectionError(f"{wheel} is not a readable wheel: {exc}") from exc


def inspect_wheel(wheel: Path) -> Report:
    """Every library in a wheel against the wheel's manifest: a native project's (the
    libraries beside its package's ``_manifest.json``) or another project's
    (``.dist-info/prebuild.json``, every library)."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InspectionError(f"{wheel} is not a readable wheel: {exc}") from exc
    with zf:
        names = sorted(zf.namelist())
        path = _manifest_path(names, wheel.name)
        variant = _read_variant_json(zf, names, wheel.name)
        label = split_filename(wheel.name)[1]
        manifest = _read_manifest(zf, path)
        if isinstance(manifest, Manifest):
            package_dir = path[: -len(MANIFEST_NAME)]
            found = [
                found_library(name[len(package_dir) :], zf.read(name))
                for name in names
                if name.startswith(package_dir)
                and "/" not in name[len(package_dir) :]
                and name.endswith(".so")
            ]
            return with_variant(
                Report(wheel, manifest, found, compare(manifest, found)), variant, label
            )
        found = [found_library(name, zf.read(name)) for name in names if is_shared_library(name)]
    project, version = path[: -len(f".dist-info/{PROJECT_MANIFEST_NAME}")].rsplit("-", 1)
    return with_variant(
        Report(wheel, manifest, found, compare(manifest, found), project, version), variant, label
    )


def wheel_variant_json(wheel: Path) -> dict | None:
    """A wheel's ``.dist-info/variant.json`` (None when it has none)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return _read_variant_json(zf, zf.namelist(), wheel.name)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InspectionError(f"{wheel} is not a readable wheel: {exc}") from exc


def _read_variant_json(zf: zipfile.ZipFile, names: list[str], wheel_name: str) -> dict | None:
    path = next(
        (n for n in names if n.count("/") == 1 and n.endswith(f".dist-info/{VARIANT_JSON}")), None
    )
    if path is None:
        return None
    try:
        return json.loads(zf.read(path))
    except ValueError as exc:
        raise InspectionError(f"{wheel_name}: {path} is not JSON: {exc}") from exc


def with_variant(report: Report, variant: dict | None, label: str | None) -> Report:
    """A report with the wheel's variant.json checked: against its label and its binaries; a
    label without variant.json is a disagreement too."""
    report.variant = variant
    if variant is not None:
        report.disagreements += variant_disagreements(variant, label, report.manifest)
    elif label is not None:
        report.disagreements.append(
            Disagreement(
                "variant", VARIANT_JSON, f"missing, though the file name's label is {label!r}"
            )
        )
    return report


def inspect_distribution(name: str) -> Report:
    """An installed distribution, by name: another project's (its ``.dist-info/prebuild.json``
    and the files it installed) or a native project's (its package directory)."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError as exc:
        raise InspectionError(f"{name} is neither a path nor an installed distribution") from exc
    text = dist.read_text(PROJECT_MANIFEST_NAME)
    if text is None:
        native = package_manifests([str(f) for f in dist.files or ()])
        if len(native) == 1:
            return with_variant(
                inspect_directory(Path(str(dist.locate_file(native[0]))).parent),
                installed_variant_json(dist),
                None,
            )
        # An editable install lists no package files: the package its name imports as.
        spec = importlib.util.find_spec(str(dist.metadata["Name"]).lower().replace("-", "_"))
        if (
            spec is not None
            and spec.origin
            and (Path(spec.origin).parent / MANIFEST_NAME).is_file()
        ):
            return with_variant(
                inspect_directory(Path(spec.origin).parent), installed_variant_json(dist), None
            )
        raise ManifestError(
            f"{name} {dist.version} is installed but carries no {PROJECT_MANIFEST_NAME}: "
            "prebuild did not build it"
        )
    manifest = ProjectManifest.from_json(text)
    found, unreadable = [], []
    for lib in manifest.libraries:  # the files the manifest names, where pip put them
        path = Path(str(dist.locate_file(lib.file)))
        if path.is_file():
            try:
                found.append(found_library(lib.file, path.read_bytes()))
            except (
                InspectionError
            ) as exc:  # damaged after installing: a disagreement, not bad input
                unreadable.append(Disagreement("file", lib.file, f"damaged: {exc}"))
    damaged = {d.file for d in unreadable}
    disagreements = [
        d for d in compare(manifest, found, complete=False) if d.file not in damaged
    ] + unreadable
    report = Report(
        Path(str(dist.locate_file(""))),
        manifest,
        found,
        disagreements,
        str(dist.metadata["Name"]),
        dist.version,
    )
    return with_variant(report, installed_variant_json(dist), None)


def installed_variant_json(dist) -> dict | None:
    """An installed distribution's variant.json (a PEP 825 variant wheel's), None without one."""
    text = dist.read_text(VARIANT_JSON)
    try:
        return None if text is None else json.loads(text)
    except ValueError as exc:
        raise InspectionError(
            f"{dist.metadata['Name']}'s {VARIANT_JSON} is not JSON: {exc}"
        ) from exc


def inspect_directory(directory: Path) -> Report:
    """An installed (or in-place) package directory holding ``_manifest.json``."""
    manifest = read_manifest(directory)
    found = [
        found_library(p.name, p.read_bytes()) for p in sorted(directory.glob("*.so")) if p.is_file()
    ]
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
        return Report(
            library,
            full,
            found,
            [Disagreement("file", library.name, "the manifest beside it does not list it")],
        )
    manifest = replace(full, libraries=tuple(listed))
    return Report(library, full, found, compare(manifest, found))


def inspect_path(path: Path | str) -> Report:
    """A wheel (``.whl``), a package directory, one library, or an installed distribution's
    name; InspectionError or ManifestError when it cannot be read."""
    text = str(path)
    path = Path(path)
    if not path.exists():
        if "/" not in text and not text.endswith((".whl", ".so")):
            return inspect_distribution(text)
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
        raise ManifestError(
            f"{wheel.name}: " + "; ".join(f"{d.file}: {d.message}" for d in problems)
        )
    if not isinstance(report.manifest, Manifest):
        raise ManifestError(f"{wheel.name} is another project's wheel, not one of prebuild's own")
    return report.manifest
