"""Libraries a classic project's source ships already built, which its build copies into the
wheel instead of compiling (the PyPI sdist of lietorch 0.6.2.post1 holds ``lietorch/lib/
liblietorch.so``, built elsewhere for eleven archs and its own torch). One that holds GPU code or
links torch was made for archs and a torch that prebuild did not choose: a wheel carrying it
could fail to load beside the torch it names (``undefined symbol``), so it is refused, saying
so. A shipped library of neither kind (a vendored MKL, TBB or OpenMP) is an ordinary file.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from prebuild.runtime.manifest import BuiltLibrary, sha256_file
from prebuild.tool.builder.project import IGNORE
from prebuild.tool.inspection import is_shared_library, needed_libraries

# The libraries a torch extension links: an object built against one torch release.
TORCH_LIBRARY_PREFIXES = ("libtorch", "libc10")


@dataclass(frozen=True)
class ShippedLibrary:
    """A wheel's library that is a file of the project's source, byte for byte."""

    file: str  # its path in the wheel
    source: str  # the file it is a copy of, relative to the source
    library: BuiltLibrary
    needed: tuple[str, ...]  # its DT_NEEDED entries

    @property
    def links_torch(self) -> bool:
        return any(n.startswith(TORCH_LIBRARY_PREFIXES) for n in self.needed)

    @property
    def built_for_torch(self) -> bool:
        """Made for archs or a torch of its own: GPU code, or torch's libraries linked."""
        return self.library.has_code or self.links_torch


def source_libraries(source: Path) -> dict[Path, tuple[int, int]]:
    """The shared libraries in ``source`` before its build runs, with their size and time
    (links not followed; VCS data and build outputs left out): what the source ships. A file
    the build then writes over is not shipped (a CMake build may put what it compiled into its
    package directory)."""
    found = {}
    for top, dirs, files in os.walk(source):
        skip = IGNORE(top, dirs)  # as the private copy leaves them out
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            path = Path(top) / name
            if is_shared_library(name) and not path.is_symlink():
                stat = path.stat()
                found[path] = (stat.st_size, stat.st_mtime_ns)
    return found


def shipped_libraries(
    shipped: dict[Path, tuple[int, int]],
    source: Path,
    wheel: Path,
    libraries: tuple[BuiltLibrary, ...],
) -> list[ShippedLibrary]:
    """The wheel's ``libraries`` (read_wheel_libraries') that are copies of a library the
    source shipped (``source_libraries``, taken before the build), untouched by the build: same
    name, same bytes."""

    def same(path: Path, lib: BuiltLibrary) -> bool:
        try:
            stat = path.stat()
        except OSError:
            return False
        return (stat.st_size, stat.st_mtime_ns) == shipped[path] and (
            stat.st_size == lib.size and sha256_file(path) == lib.sha256
        )

    found = []
    with zipfile.ZipFile(wheel) as zf:
        for lib in libraries:
            copies = [p for p in shipped if p.name == Path(lib.file).name and same(p, lib)]
            if copies:
                needed = needed_libraries(zf.read(lib.file))
                found.append(
                    ShippedLibrary(lib.file, str(copies[0].relative_to(source)), lib, needed)
                )
    return found


def shipped_message(wheel_name: str, shipped: list[ShippedLibrary], url: str | None) -> str:
    """Pure: why a wheel whose ``shipped`` libraries were built for a torch of their own is
    refused, and what to do."""

    def what(lib: ShippedLibrary) -> str:
        held = []
        if lib.library.has_code:
            archs = [a.sm for a in lib.library.sass] + [a.compute for a in lib.library.ptx]
            held.append(f"GPU code for {', '.join(archs)}")
        if lib.links_torch:
            held.append(
                "links " + ", ".join(n for n in lib.needed if n.startswith(TORCH_LIBRARY_PREFIXES))
            )
        where = "" if lib.source == lib.file else f"the source's {lib.source}: "
        return f"{lib.file} ({where}{'; '.join(held)})"

    where = (
        f"from its repository ({url}), where they are compiled"
        if url
        else "from the repository where they are compiled"
    )
    return (
        f"{wheel_name}: its build does not compile these libraries, it copies them from its "
        "source, where they ship already built: "
        f"{'; '.join(what(lib) for lib in shipped)}. They were made elsewhere, for archs and a "
        "torch that prebuild did not choose, and could fail to load beside the torch this wheel "
        f"would name. Build the project {where}, or install its own wheel. No wheel was written."
    )
