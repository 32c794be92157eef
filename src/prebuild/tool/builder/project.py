"""What ``prebuild wheel ... PROJECT`` builds: a native project (``[tool.prebuild]`` in its
pyproject.toml, prebuild's own checkout among them), built in place like ``pip wheel .``, or
another project (a classic one: a source directory, an sdist, or anything pip accepts as a
requirement or URL for a source build), of which prebuild makes a private copy: it never
writes into the user's tree. An sdist or requirement of a native project is unpacked into
the private copy too; a git URL is cloned whole into it (``clone_source``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from packaging.version import InvalidVersion, Version

from prebuild.runtime.manifest import sha256_file
from prebuild.tool.builder import processes
from prebuild.tool.builder.classic_objects import STATE_FILE as OBJECTS_RECORD
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.config import declares_kernels
from prebuild.tool.builder.source_gaps import code_host_url, downloads_advice

NATIVE = "native"
CLASSIC = "classic"

# Not copied from a user's tree: VCS data and earlier build outputs.
IGNORED = (
    ".git",
    ".hg",
    ".svn",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".venv*",
    ".tox",
    ".nox",
)
# IGNORED as shutil.copytree's ``ignore`` (which of a folder's entries to leave out); the walks
# that must skip what the private copy leaves out use it too.
IGNORE = shutil.ignore_patterns(*IGNORED)


def copy_ignore(leave_out: tuple[Path, ...]):
    """IGNORE, and the folders ``leave_out`` where they lie inside what is copied: prebuild's
    own workspace and wheel folder (``--build-dir work`` inside the project would otherwise be
    copied into itself, without end)."""
    places = {path.resolve() for path in leave_out}

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = set(IGNORE(folder, names))
        if places:
            top = Path(folder).resolve()
            skip.update(name for name in names if top / name in places)
        return skip

    return ignore


SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")


@dataclass(frozen=True)
class Project:
    kind: str  # NATIVE ([tool.prebuild]) or CLASSIC
    source: Path
    origin: str  # what the user named
    # The version setuptools_scm gives the checkout a classic directory was copied from: its
    # copy has no .git to read it from (``scm_version``).
    scm_version: str | None = None
    # The checkout around a classic directory, where its other entries are linked rather than
    # copied (larger than MIRROR_COPY_LIMIT): the build could write into it (``copy_in_checkout``).
    linked_checkout: Path | None = None
    # Which source this is, for the objects a build keeps in its copy (classic_objects): a
    # directory's path, an archive's digest, a git URL. "" for a native project built in place.
    identity: str = ""
    # The sdist pip refused for the local label its setup.py adds to the version, fetched by
    # its URL instead (``download_source``).
    relabelled: Relabelled | None = None
    # pip's metadata step passed only with torch.cuda answering for a GPU (none visible): its
    # build starts with the answer (pipeline.fetch_project).
    gpu_answered: bool = False


@dataclass(frozen=True)
class Relabelled:
    """An sdist whose setup.py adds a local label to its version when it runs (auto-gptq 0.7.1
    says ``0.7.1+cu130``): pip refuses it as "inconsistent" with the index's ``version``, and
    goes on to older releases."""

    url: str
    version: str  # the index's (and the archive's name's)
    labelled: str  # its metadata's


# pip's line for such an sdist (as pip 23.2 words it), one line of its log.
_INCONSISTENT = re.compile(
    r"Requested \S+ from (?P<url>\S+) has inconsistent version: "
    r"expected '(?P<expected>[^']+)', but metadata has '(?P<got>[^']+)'"
)


def relabelled_sdist(line: str) -> Relabelled | None:
    """Pure: the sdist a line of pip's log says it discarded for a version that is the index's
    plus a local label; None for any other line (another version altogether is not this)."""
    found = _INCONSISTENT.search(line)
    if found is None:
        return None
    try:
        expected, got = Version(found["expected"]), Version(found["got"])
    except InvalidVersion:
        return None
    if expected.local is not None or got.local is None or Version(got.public) != expected:
        return None
    return Relabelled(found["url"], found["expected"], found["got"])


def is_native(path: Path) -> bool:
    """A directory holding a pyproject.toml with ``[tool.prebuild]`` (ConfigError if unreadable)."""
    return path.is_dir() and declares_kernels(path)


def find_native_project(start: Path) -> Path | None:
    """The native project around ``start``: it or its nearest parent declaring kernels."""
    start = start.resolve()
    for path in (start, *start.parents):
        if (path / "pyproject.toml").is_file():
            return path if is_native(path) else None
    return None


def _single_root(directory: Path) -> Path:
    """An unpacked sdist holds one top directory (``name-1.0/``); a zip of a tree may not."""
    entries = [p for p in directory.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else directory


def unpack(archive: Path, dest: Path) -> Path:
    """Unpack an sdist or zip into ``dest`` (refusing members that point outside it)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if not (dest / name).resolve().is_relative_to(dest.resolve()):
                        raise BuildError(
                            f"{archive.name}: member {name!r} points outside the archive"
                        )
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12, 3.11.4
                    tf.extractall(dest, filter="data")  # no absolute paths, links out, or devices
                else:
                    for member in tf.getmembers():
                        if (
                            member.issym()
                            or member.islnk()
                            or not (dest / member.name).resolve().is_relative_to(dest.resolve())
                        ):
                            raise BuildError(
                                f"{archive.name}: member {member.name!r} points outside the archive"
                            )
                    tf.extractall(dest)
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise BuildError(f"cannot unpack {archive}: {exc}") from exc
    return _single_root(dest)


def _has_build_files(path: Path) -> bool:
    return (path / "setup.py").is_file() or (path / "pyproject.toml").is_file()


def no_build_files(what: str, path: Path) -> BuildError:
    """The refusal of a source without setup.py or pyproject.toml (``what``: how the user named
    it), naming a setup script it has under another name (GPTQ-for-LLaMa's setup_cuda.py,
    meant for `python setup_cuda.py install`): builders, pip's as prebuild's, run setup.py."""
    scripts = sorted(
        f.name
        for f in path.glob("setup*.py")
        if re.search(r"\bsetup\s*\(", f.read_text(encoding="utf-8", errors="replace"))
    )
    hint = (
        f" It has {', '.join(scripts)}, a setup script under another name: a build (pip's, "
        f"prebuild's) runs setup.py, so copy it to setup.py in {path} (cp {scripts[0]} "
        "setup.py) and run the command again."
        if scripts
        else ""
    )
    return BuildError(
        f"{what} has no setup.py or pyproject.toml: not a project prebuild can build.{hint}"
    )


class DownloadError(BuildError):
    """pip could not get a requirement's source; ``reason`` is the last error its output names
    (a project's setup.py raising in pip's metadata step, for one)."""

    def __init__(self, message: str, metadata_failed: bool, reason: str):
        super().__init__(message)
        self.metadata_failed, self.reason = metadata_failed, reason


def last_error(output: str) -> str:
    """The last ``SomethingError: ...`` line of a (nested) traceback, else the last non-empty line."""
    errors = re.findall(r"^\s*[\w.]*(?:Error|Exception): .+$", output, re.M)
    lines = [line for line in output.splitlines() if line.strip()]
    return (errors[-1] if errors else lines[-1] if lines else "").strip()


def setup_requires_hint(output: str) -> str:
    """Pure: where a project's setup.py failed having setuptools fetch what it needs to build
    (``setup_requires``, into ``.eggs``: inplace-abn 1.1.0's setuptools_scm, which fails so),
    what to install instead; "" otherwise."""
    if "fetch_build_eggs" not in output and "/.eggs/" not in output:
        return ""
    names = list(dict.fromkeys(re.findall(r"/\.eggs/([A-Za-z0-9_.]+?)-\d", output)))
    names += [n for n in re.findall(r"Searching for ([A-Za-z0-9_.\-]+)", output) if n not in names]
    return (
        f"Its setup.py has setuptools fetch what it needs to build "
        f"({' '.join(names) or 'its setup_requires'}), which fails here. Install it in this "
        "environment first (prebuild builds without isolation, so that this torch is used): "
        f"pip install {' '.join(names) or '<its setup_requires>'}"
    )


# Modules an older setup.py imports that a current environment no longer has: what removed
# each, and what to do (prebuild builds without isolation, with this environment's packages).
REMOVED_MODULES = {
    "pkg_resources": (
        "setuptools removed it in 82.0",
        "install an older setuptools in this environment, then build again: "
        "pip install 'setuptools>=72.2,<82'",
    ),
    "imp": (
        "Python removed it in 3.12",
        "build it with Python 3.11 or older (an environment of that Python with torch, nvcc "
        "and prebuild; the wheel is then for that Python)",
    ),
}


def removed_module_hint(output: str) -> str:
    """Pure: where a project's setup.py failed importing a module its tools have since
    removed (tiny-cuda-nn's torch bindings import pkg_resources), what removed it and what to
    do; "" otherwise."""
    hints = []
    for name in dict.fromkeys(re.findall(r"No module named '([\w.]+)'", output)):
        if name in REMOVED_MODULES:
            what, fix = REMOVED_MODULES[name]
            hints.append(f"Its setup.py imports {name}, and {what}: {fix}.")
    return " ".join(hints)


# An environment variable's name as projects write them (TMS_CUDA_MAJOR, MAX_JOBS), and the words
# of an error that asks for one.
_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")
_ASKS_FOR_VARIABLE = re.compile(
    r"(?i)\benv(?:ironment)?\.? ?var(?:iable)?s?\b|\b(?:is|are) not set\b"
)


# "Set IGNORE_TORCH_VER=1 to proceed" (kaolin's setup.py with a torch newer than it knows).
_SET_VARIABLE = re.compile(r"(?i:\bset)\s+`?([A-Z][A-Z0-9]*_[A-Z0-9_]+)=([^\s`'\",;]*[^\s`'\",;.])")


def variable_hint(output: str) -> str:
    """Pure: where a project's setup.py failed asking for an environment variable
    (torch-memory-saver 0.0.10's: "TMS_CUDA_MAJOR env var must be set for CUDA builds", kaolin's
    "Set IGNORE_TORCH_VER=1 to proceed", or a ``KeyError`` of ``os.environ``), which to set
    and how; "" otherwise."""
    error = last_error(output)
    values: dict[str, str] = dict(_SET_VARIABLE.findall(error))
    if not values and _ASKS_FOR_VARIABLE.search(error):
        values = dict.fromkeys(_VARIABLE.findall(error), "<value>")
    elif (key := re.match(r"KeyError: '([A-Z][A-Z0-9_]*)'$", error)) and "environ" in output:
        values = {key.group(1): "<value>"}
    names = list(values)
    if not names:
        return ""
    setting = " ".join(f"{name}={value}" for name, value in values.items())
    return (
        f"Its setup.py asks for the environment variable{'s' if len(names) > 1 else ''} "
        f"{', '.join(names)} ({error.rstrip('.')}). The project's build runs in prebuild's "
        f"environment: set {'them' if len(names) > 1 else 'it'} for the command"
        + (", as the project's documentation says" if "<value>" in setting else "")
        + f": {setting} prebuild wheel ..."
    )


# distutils' `dry_run` argument, which setuptools 81.0 removed (pypa/setuptools#4872): as the
# error reads where a caller passes it by name, and where numpy.distutils' new_compiler passes it
# by position (MinkowskiEngine 0.5.4's setup.py asks numpy.distutils for BLAS).
_DRY_RUN = re.compile(
    r"unexpected keyword argument 'dry_run'"
    r"|Compiler\.__init__\(\) takes from 1 to 3 positional arguments but 4 were given"
)


def dry_run_hint(output: str) -> str:
    """Pure: where a setup.py (or a build tool it calls: numpy.distutils) failed passing the
    ``dry_run`` argument setuptools 81 removed, what to do; "" otherwise."""
    if not _DRY_RUN.search(output):
        return ""
    through = (
        " (through numpy.distutils, which its setup.py uses)" if "numpy/distutils" in output else ""
    )
    return (
        f"Its build passes distutils the `dry_run` argument{through}, which setuptools removed "
        "in 81.0: install an older setuptools in this environment, then build again: pip "
        "install 'setuptools>=72.2,<81'."
    )


def environment_hints(output: str) -> str:
    """Pure: what a failed setup.py's output says is missing from the build's environment
    (``setup_requires_hint``, ``removed_module_hint``, ``dry_run_hint``, ``variable_hint``),
    one paragraph each; "" if nothing."""
    hints = (
        setup_requires_hint(output),
        removed_module_hint(output),
        dry_run_hint(output),
        variable_hint(output),
    )
    return "\n\n".join(h for h in hints if h)


# Where pip unpacks the sdist whose metadata it reads (pip download's
# pip-download-*/<name>_<hash>/, pip install's pip-req-build-*/), and a file not found.
_PIP_SOURCE = r"/pip-(?:download|req-build)-[^/'\"]+/(?:[^/'\"]+_[0-9a-f]{32}/)?"
_NOT_FOUND = re.compile(
    r"FileNotFoundError: \[Errno 2\] No such file or directory: '(?P<path>[^']+)'"
)


def incomplete_sdist_hint(output: str) -> str:
    """Pure: where a requirement's setup.py, run by pip to read its metadata, failed opening a
    file of its own sdist (marlin-kernels 0.3.7's lacks the envs.py its setup.py imports, sru
    2.6.0's the requirements.txt it reads: a path relative to the sdist, pip's working directory
    there), that the sdist is incomplete and where to build from; "" otherwise."""
    for found in _NOT_FOUND.finditer(output):
        path = found.group("path")
        inside = re.search(_PIP_SOURCE + r"(?P<file>.+)$", path)
        if inside is None and (path.startswith("/") or not re.search(_PIP_SOURCE, output)):
            continue  # not the sdist's: a file of the machine, or of another tool
        name = inside.group("file") if inside else path.removeprefix("./")
        return (
            f"Its sdist lacks {name}, which its setup.py reads as it runs: the sdist was "
            "published without it (its makers' packaging leaves it out), so it cannot be built "
            "as it is, by prebuild or pip. Build it from its repository instead, at the release's "
            "tag: prebuild wheel --arch ... 'git+https://...@TAG'."
        )
    return ""


def git_source(spec: str) -> tuple[str, str | None, str] | None:
    """Pure: the clone URL, the revision (None: the default branch) and the subdirectory ("":
    the root) of a pip git requirement (``git+https://host/repo@rev#subdirectory=dir``, with
    ``name @`` in front or not); None for any other spec."""
    url = spec.split(" @ ", 1)[1].strip() if " @ " in spec else spec.strip()
    if not url.startswith("git+"):
        return None
    url, _, fragment = url[len("git+") :].partition("#")
    subdirectory = parse_qs(fragment).get("subdirectory", [""])[0].strip("/")
    parts = urlsplit(url)
    # as pip reads it: the last @ of the path (the user in user@host is in the netloc)
    path, rev = parts.path.rsplit("@", 1) if "@" in parts.path else (parts.path, "")
    return urlunsplit(parts._replace(path=path)), rev or None, subdirectory


def git_env() -> dict[str, str]:
    """The environment of every git command prebuild runs, itself or through setuptools_scm:
    a private repository fails instead of asking for a password, and git refreshes no index
    in the user's checkout (its optional locks off)."""
    return {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}


def clone_source(spec: str, dest: Path) -> Path:
    """Clone a git requirement's repository into ``dest`` with its submodules, at its
    revision, as pip would, and return the project's directory in it (its subdirectory). The
    whole checkout is kept, not only the subdirectory that ``pip download`` would archive:
    tiny-cuda-nn's ``bindings/torch`` compiles ``../../src``, and setuptools_scm reads .git."""
    parsed = git_source(spec)
    assert parsed is not None, spec
    url, rev, subdirectory = parsed
    repo = dest / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    dest.mkdir(parents=True, exist_ok=True)
    env = git_env()
    steps = [["git", "clone", "-q", "--recurse-submodules", url, str(repo)]]
    if rev:
        steps += [
            ["git", "-C", str(repo), "checkout", "-q", rev],
            ["git", "-C", str(repo), "submodule", "update", "-q", "--init", "--recursive"],
        ]
    for step in steps:
        try:
            done = processes.run(step, capture_output=True, text=True, env=env)
        except FileNotFoundError:
            raise DownloadError(f"cannot get {spec!r}: git is not installed", False, "") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()
            raise DownloadError(
                f"cannot get the source of {spec!r} with git ({' '.join(step[:4])} ...):\n"
                + said[-4000:],
                False,
                said.splitlines()[-1] if said else "",
            )
    project = (repo / subdirectory).resolve()
    if not project.is_relative_to(repo.resolve()) or not project.is_dir():
        raise BuildError(f"{spec}: the repository has no directory {subdirectory!r}")
    return project


def download_source(
    spec: str, dest: Path, env: dict[str, str] | None = None
) -> tuple[Path, Relabelled | None]:
    """``pip download`` the source of ``spec`` (a requirement or a URL: ``gsplat==1.5.3``,
    ``git+https://...``) into ``dest``, in ``env`` (default: this process's); returns the
    archive, and the sdist pip refused for its setup.py's local label, which was then fetched by
    its URL (``relabelled_sdist``). Without build isolation: a classic setup.py imports torch
    even to say its name, and isolation would install another."""
    if importlib.util.find_spec("pip") is None:
        raise DownloadError(no_pip_message(spec, sys.prefix), False, "No module named pip")
    # Emptied first: an earlier run's archive (--build-dir) would be a second one.
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--no-build-isolation",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
    ]
    returncode, output, relabelled = _pip_download([*command, spec], env)
    if relabelled is not None:
        # The release asked for, by its URL: pip checks a direct URL's metadata against no
        # index version. (Left to itself, pip would have fetched an older release, or none.)
        for archive in dest.iterdir():
            archive.unlink()
        returncode, output, _ = _pip_download([*command, relabelled.url], env)
    archives = [p for p in dest.iterdir() if p.name.endswith(SDIST_SUFFIXES)]
    if returncode != 0 or len(archives) != 1:
        # pip runs the project's setup.py to read its metadata (a classic one imports torch's
        # CUDAExtension there), so a project's own error can stop the download.
        hint = (
            environment_hints(output)
            or incomplete_sdist_hint(output)
            or downloads_advice(output, METADATA_DOWNLOADS)
            or wheels_only_hint(spec, output, env)
        )
        raise DownloadError(
            f"cannot get the source of {spec!r} with pip:\n{output[-4000:]}"
            + (f"\n\n{hint}" if hint else ""),
            "metadata-generation-failed" in output,
            last_error(output),
        )
    return archives[0], relabelled


def _pip_download(
    command: list[str], env: dict[str, str] | None
) -> tuple[int, str, Relabelled | None]:
    """Run ``pip download``: its exit status, its output (stderr with stdout) and the first sdist
    it refused for a local label, at which it is stopped (it would go on to older releases,
    running each one's setup.py). Stopped with SIGINT, which pip ends on with its temporary
    folders removed."""
    lines: list[str] = []
    with processes.popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            relabelled = relabelled_sdist(line)
            if relabelled is not None:
                proc.send_signal(signal.SIGINT)
                try:
                    rest = proc.communicate(timeout=30)[0]  # what it says as it stops
                except subprocess.TimeoutExpired:
                    processes.stop_tree(proc.pid)
                    rest = ""
                return proc.wait(), "".join(lines) + (rest or ""), relabelled
    return proc.returncode, "".join(lines), None


# Who downloads, and when, where a setup.py fetches what its source lacks as pip reads its
# metadata (ctcdecode 1.0.2: openfst and boost, from GitHub and SourceForge).
METADATA_DOWNLOADS = (
    "Its setup.py downloads what its source lacks as soon as it runs (pip's metadata step, "
    "before anything is built)"
)


def no_pip_message(spec: str, prefix: str) -> str:
    """Pure: why ``spec`` cannot be fetched in an environment without pip (uv makes its venvs
    without it; ``build`` builds without it, so only the fetch needs it), and what to do."""
    return (
        f"cannot get the source of {spec!r}: prebuild fetches it with pip, and this environment "
        f"({prefix}) has none (uv makes its venvs without it). Install it there (`uv pip install "
        "pip`), or give prebuild the source itself: a directory, an sdist (.tar.gz) or a git URL "
        "(git+https://...)."
    )


# How pip says that it found no source it may use: no distribution at all, or (with a pip
# constraint on the requirement) a conflict between the request and the constraint.
_NO_SOURCE = ("No matching distribution found", "ResolutionImpossible", "conflicting dependencies")


def wheels_only_hint(spec: str, output: str, env: dict[str, str] | None) -> str:
    """Where pip found no source distribution of ``spec``: if the index has a wheel of it (its
    makers publish wheels only: bitsandbytes 0.50.2), say so and where its source lives; ""
    otherwise. pip is asked for the wheel it would install (its metadata only, nothing
    installed). Under a pip constraint on it (``PIP_CONSTRAINT``, pip.conf's ``constraint``:
    ``torchvision<=0.29.1``), pip says the same as a conflict (ResolutionImpossible): the
    download asks for no dependency, so only the requirement itself can conflict there."""
    if not any(said in output for said in _NO_SOURCE):
        return ""
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
        "--only-binary", ":all:", "--quiet", "--report", "-", "--disable-pip-version-check", spec,
    ]  # fmt: skip
    try:
        proc = processes.run(command, capture_output=True, text=True, env=env)
    except OSError:
        return ""
    return wheels_only_message(spec, proc.stdout) if proc.returncode == 0 else ""


def wheels_only_message(spec: str, report: str) -> str:
    """Pure: the hint for ``spec``, of which pip's installation report (``pip install
    --dry-run --report -``) names a wheel; "" if it names none."""
    try:
        (item,) = json.loads(report)["install"]
        wheel = item["download_info"]["url"].rsplit("/", 1)[-1]
        metadata = item.get("metadata", {})
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""
    name, version = metadata.get("name", spec), metadata.get("version", "")
    said = (
        f"{name} {version} has no source distribution on the package index, only wheels "
        f"({wheel}: built by its makers, for the archs and torch they chose). prebuild "
        "compiles a project from its source"
    )
    url = code_host_url(metadata.get("project_url") or (), metadata.get("home_page"))
    if url is None:
        return f"{said}: build it from its repository (a git URL: git+https://...@TAG)."
    return (
        f"{said}: build it from its repository, {url}, at the tag of {version}: "
        f"prebuild wheel --arch ... 'git+{url}@TAG'."
    )


def names_a_path(spec: str) -> bool:
    """Pure: whether ``spec`` can only be a path (``./fused-ssim``, ``dist/x-1.0.tar.gz``), never
    a requirement or a URL: it has a slash or an archive's suffix, and no URL's ``://`` or ``@``."""
    if "://" in spec or "@" in spec or spec.startswith("git+"):
        return False
    return "/" in spec or spec.startswith("~") or spec.endswith((*SDIST_SUFFIXES, ".whl"))


def project_kind(spec: str | None) -> str | None:
    """NATIVE or CLASSIC when known before anything is copied or downloaded (a directory;
    ``None``: the current directory); None for an sdist or a requirement, known once unpacked."""
    if spec is None:
        return NATIVE if find_native_project(Path.cwd()) else CLASSIC
    path = Path(spec).expanduser()
    if not path.exists() and names_a_path(spec):
        # Else pip is asked for it, and says so in a traceback (a .tar.gz) or not at all.
        raise BuildError(
            f"{spec}: no such file or directory. prebuild builds a directory, an sdist "
            "(.tar.gz, .zip), a requirement (gsplat==1.5.3) or a git URL (git+https://...)."
        )
    if not path.is_dir():
        return None
    if is_native(path):
        return NATIVE
    if not _has_build_files(path):  # said first: no toolchain check is about it
        raise no_build_files(spec, path)
    return CLASSIC


def enclosing_checkout(path: Path) -> Path | None:
    """The root of the git checkout ``path`` lies in: itself or its nearest parent holding
    ``.git``; None if it is in none."""
    path = path.resolve()
    return next((d for d in (path, *path.parents) if (d / ".git").exists()), None)


# The most of a checkout around a project that its private copy takes with it (copied, so that the
# build can write nowhere but in the workspace); a larger checkout's other entries are linked.
MIRROR_COPY_LIMIT = 256 * 2**20


def _file_sizes(paths: list[Path], ignore) -> Iterator[int]:
    """The size of each file under ``paths``, ``ignore``'s matches left out, links not followed."""
    for path in paths:
        if not path.is_dir() or path.is_symlink():
            yield path.lstat().st_size
            continue
        for top, dirs, files in os.walk(path):
            skip = ignore(top, [*dirs, *files])
            dirs[:] = [d for d in dirs if d not in skip]
            yield from ((Path(top) / f).lstat().st_size for f in files if f not in skip)


def tree_size(paths: list[Path], ignore, limit: int) -> int:
    """The bytes of the files under ``paths`` (``ignore``: shutil.ignore_patterns' kind, its
    matches left out; links not followed), counted until they pass ``limit``."""
    total = 0
    for size in _file_sizes(paths, ignore):
        total += size
        if total > limit:
            break
    return total


def copy_in_checkout(
    project: Path,
    root: Path | None,
    copy: Path,
    limit: int | None = None,
    leave_out: tuple[Path, ...] = (),
) -> tuple[Path, bool]:
    """Copy ``project`` into ``copy``; where its copy is, and whether the checkout around it
    was linked rather than copied. A project in a subdirectory of a checkout (``root``, its
    ``enclosing_checkout``; tiny-cuda-nn's ``bindings/torch``, whose setup.py compiles
    ``../../src/*.cu``) is copied to the same place in a mirror of the checkout, so that what
    the build reads outside the project's directory is where pip's in-tree build would find
    it. The mirror's other entries are copies too, unless together they pass ``limit`` bytes:
    then they are symbolic links to the originals (and a build writing outside its directory
    would write into the checkout). VCS data, build outputs (IGNORED) and the folders
    ``leave_out`` (copy_ignore) are left out."""
    project = project.resolve()
    ignore = copy_ignore((copy, *leave_out))
    if root is None or root == project:
        shutil.copytree(project, copy, symlinks=True, ignore=ignore)
        return copy, False
    around: list[tuple[Path, Path]] = []  # (original, its place in the mirror)
    here = root
    for part in project.relative_to(root).parts:
        mirror = copy / here.relative_to(root)
        mirror.mkdir(parents=True, exist_ok=True)
        names = sorted(entry.name for entry in here.iterdir() if entry.name != part)
        skip = ignore(str(here), names)
        around += [(here / name, mirror / name) for name in names if name not in skip]
        here = here / part
    limit = MIRROR_COPY_LIMIT if limit is None else limit
    linked = tree_size([original for original, _ in around], ignore, limit) > limit
    for original, place in around:
        if linked:
            place.symlink_to(original)
        elif original.is_dir() and not original.is_symlink():
            shutil.copytree(original, place, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(original, place, follow_symlinks=False)
    place = copy / project.relative_to(root)
    shutil.copytree(project, place, symlinks=True, ignore=ignore)
    return place, linked


def copy_git_data(root: Path, copy: Path) -> bool:
    """Give ``copy``, the copy of the checkout at ``root``, git data of its own at the
    checkout's HEAD (its branch, or detached), so that a setup.py running git reads what it
    would in the checkout: FlashMLA's versions itself ``1.0.0+<git rev-parse --short HEAD>``,
    else with the time of the build, which differs from one arch's wheel to the next. A clone
    ``--shared`` (the checkout's objects read in place, nothing written there), its index read
    from HEAD, its files the copy's. False where git cannot (none installed, no repository)."""
    env = git_env()

    def git(*args: str, where: Path = root) -> str | None:
        try:
            done = processes.run(
                ["git", "-C", str(where), *args], capture_output=True, text=True, env=env
            )
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--verify", "-q", "HEAD")
    if head is None:
        return False
    branch = git("symbolic-ref", "-q", "HEAD")
    clone = copy / ".git-data"
    made = git("clone", "-q", "--shared", "--no-checkout", str(root), str(clone), where=copy)
    if made is None:
        shutil.rmtree(clone, ignore_errors=True)
        return False
    (clone / ".git").rename(copy / ".git")
    shutil.rmtree(clone)
    steps = (
        [("update-ref", branch, head), ("symbolic-ref", "HEAD", branch)]
        if branch
        else [("update-ref", "--no-deref", "HEAD", head)]
    )
    for step in (*steps, ("read-tree", "HEAD")):
        if git(*step, where=copy) is None:
            shutil.rmtree(copy / ".git")
            return False
    return True


# What setuptools_scm takes as the version where the source has no git data to read it from.
SCM_VERSION_ENV = "SETUPTOOLS_SCM_PRETEND_VERSION"


def uses_setuptools_scm(project: Path) -> bool:
    """Whether the project takes its version from its checkout with setuptools_scm (its
    pyproject.toml or setup.py names it)."""
    return any(
        (project / name).is_file()
        and re.search(
            r"setuptools[_-]scm|use_scm_version",
            (project / name).read_text(encoding="utf-8", errors="replace"),
        )
        for name in ("pyproject.toml", "setup.py", "setup.cfg")
    )


def scm_version(project: Path) -> str | None:
    """The version setuptools_scm gives ``project`` where it uses it and lies in a git
    checkout, read there as pip's in-tree build would (``python -m setuptools_scm``, which
    writes no version file; git without its optional index refresh, so nothing is written);
    None otherwise, or where it cannot be read (the build then says why)."""
    if enclosing_checkout(project) is None or not uses_setuptools_scm(project):
        return None
    try:
        done = processes.run(
            [sys.executable, "-m", "setuptools_scm"],
            cwd=project,
            env=git_env(),
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1].strip() if done.returncode == 0 and lines else None


def resolve_project(
    spec: str | None,
    work: Path,
    copy_native: bool = False,
    metadata_env: dict[str, str] | None = None,
    leave_out: tuple[Path, ...] = (),
) -> Project:
    """The project to build. ``None``: the project around the current directory. A native
    directory is built in place, unless ``copy_native`` (a cached build: the compile commands
    then name the same paths whichever checkout the project came from). ``metadata_env``: the
    environment of pip's download, which runs the project's setup.py for its metadata. A
    directory's copy leaves out ``work`` and the folders ``leave_out`` (the wheels' folder).

    The copy is made afresh each time, but the objects an earlier build left in it (setuptools'
    ``build/``, marked by classic_objects' record) are carried into the new copy when it is in
    the same place: the builder's record decides what of them is used (nothing, for another
    project's)."""
    copy = work / "source"
    kept = set_aside_objects(copy, work / "source-objects")
    try:
        project = _resolve_project(spec, work, copy, copy_native, metadata_env, (work, *leave_out))
        if kept is not None:
            put_back_objects(kept, copy, project)
    finally:
        shutil.rmtree(work / "source-objects", ignore_errors=True)  # unless put back
    return project


def set_aside_objects(copy: Path, aside: Path) -> tuple[Path, Path] | None:
    """Move the ``build/`` that a classic build's record marks in ``copy`` (an earlier copy)
    into ``aside``; where the project was in the copy, and where its ``build/`` is now (None if
    there is none)."""
    shutil.rmtree(aside, ignore_errors=True)
    for top, dirs, _ in os.walk(copy):
        if "build" in dirs and (Path(top) / "build" / OBJECTS_RECORD).is_file():
            aside.mkdir(parents=True)
            (Path(top) / "build").rename(aside / "build")
            return Path(top).relative_to(copy), aside / "build"
        skip = IGNORE(top, dirs)  # VCS data, others' build outputs
        dirs[:] = [d for d in dirs if d not in skip]
    return None


def put_back_objects(kept: tuple[Path, Path], copy: Path, project: Project) -> bool:
    """Move the ``build/`` set aside (set_aside_objects') into the new copy, if the project's
    source is where it was in the old one and has no ``build/`` of its own."""
    place, build = kept
    source = project.source
    if (
        project.kind != CLASSIC
        or not source.is_relative_to(copy)
        or source.relative_to(copy) != place
        or (source / "build").exists()
    ):
        return False
    build.rename(source / "build")
    return True


def archive_identity(archive: Path) -> str:
    """An sdist's identity (Project.identity): its digest, so that another version downloaded
    under the same name, or rebuilt in the same place, is another source."""
    return f"{archive.name} sha256:{sha256_file(archive)}"


def _resolve_project(
    spec: str | None,
    work: Path,
    copy: Path,
    copy_native: bool,
    metadata_env: dict[str, str] | None,
    leave_out: tuple[Path, ...],
) -> Project:
    """resolve_project's project, made afresh in ``copy`` (``leave_out``: copy_ignore's)."""
    if spec is None:
        native = find_native_project(Path.cwd())
        if native is not None:
            if not copy_native:
                return Project(NATIVE, native, str(native))
            spec = str(native)
        else:
            spec = "."
    path = Path(spec).expanduser()
    shutil.rmtree(copy, ignore_errors=True)
    if path.is_dir():
        if is_native(path):
            if not copy_native:
                return Project(NATIVE, path.resolve(), spec)
            shutil.copytree(path, copy, symlinks=True, ignore=copy_ignore((copy, *leave_out)))
            return Project(NATIVE, copy, spec)
        if not _has_build_files(path):
            raise no_build_files(spec, path)
        root = enclosing_checkout(path)
        source, linked = copy_in_checkout(path, root, copy, leave_out=leave_out)
        if root is not None:
            copy_git_data(root, copy)
        return Project(
            CLASSIC,
            source,
            spec,
            scm_version(path),
            root if linked else None,
            identity=str(path.resolve()),
        )
    if git_source(spec) is not None and not path.exists():
        source = clone_source(spec, work / "download")
        if not _has_build_files(source):
            raise no_build_files(f"{spec}: the source", source)
        return Project(NATIVE if is_native(source) else CLASSIC, source, spec, identity=spec)
    if path.is_file():
        if not path.name.endswith(SDIST_SUFFIXES):
            raise BuildError(
                f"{spec} is a file but not a source archive ({', '.join(SDIST_SUFFIXES)})"
            )
        archive, relabelled = path, None
    else:
        archive, relabelled = download_source(spec, work / "download", metadata_env)
    source = unpack(archive, copy)
    if not _has_build_files(source):
        raise no_build_files(f"{spec}: the source", source)
    kind = NATIVE if is_native(source) else CLASSIC
    return Project(kind, source, spec, identity=archive_identity(archive), relabelled=relabelled)
