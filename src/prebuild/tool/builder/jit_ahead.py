"""A project that compiles its code when first used, made ahead of time.

Many of the field's projects build no extension at install time: their Python calls
``torch.utils.cpp_extension.load`` when imported (KNN_CUDA) or at the first op (nvdiffrast
0.3's ``_get_plugin()``), and every user's machine compiles, with the locks, caches and
toolchain that takes. Where such a project's wheel holds no library, the build runs those
compiles itself: what runs each one is read from the wheel's Python
(jit_sites.first_use_triggers), then run in a child process with the build's variables (the
shim compilers, the archs asked, torch.cuda answering for a GPU) by ``jit_ahead_run.py``, which
records the library each compile made. The libraries go into the wheel beside the guard
(``_prebuild_guard_<name>/jit/<name>.so``), and the guard hands them to the project's own
``load`` calls at run time instead of compiling (classic_guard.Guard.serve). The project's files
are not changed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import prebuild
from prebuild.runtime.classic_guard import ALLOW_ENV
from prebuild.tool.builder import jit_ahead_run, processes
from prebuild.tool.builder.api_mends import (
    SourceChange,
    mended_again,
    mends_recorded,
    recorded_changes,
    recorded_text,
)
from prebuild.tool.builder.base import follow_steps
from prebuild.tool.builder.build_log import log_since, log_size
from prebuild.tool.builder.guard_files import guard_package
from prebuild.tool.builder.project import REMOVED_MODULES
from prebuild.tool.builder.relabel import rewrite_wheel
from prebuild.tool.jit_sites import Trigger, Unreached, first_use_triggers, given_trigger


@dataclass(frozen=True)
class FirstUseLibrary:
    """A library one compile made: the ``name`` the project gives ``load``, the call_key of its
    call (what it compiles: the guard serves it to that call alone), its file, the
    ``file:line`` of the call in the wheel (the innermost of the wheel's frames: the call may
    be another package's) and the trigger that ran it."""

    name: str
    key: str
    file: Path
    site: str
    trigger: str = ""  # what ran it (a Trigger, as shown)


@dataclass(frozen=True)
class FailedRun:
    """A trigger that raised: what it was, its error, and the name given ``load`` whose
    compile raised it ("" where the project's own code did)."""

    trigger: str
    error: str
    compile: str = ""


@dataclass(frozen=True)
class FirstUse:
    """What running a wheel's first-use compiles made: ``libraries``, the triggers run, those
    that failed, and the compiles nothing reached."""

    libraries: tuple[FirstUseLibrary, ...] = ()
    triggers: tuple[Trigger, ...] = ()
    failed: tuple[FailedRun, ...] = ()
    unreached: tuple[Unreached, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()  # trigger, the module that did not import it
    output: str = ""  # what the child printed: the compilers' errors among it
    changes: tuple[SourceChange, ...] = ()  # the mends that made them compile
    kept: bool = False  # an earlier run's compiles were there to go on from

    @property
    def failed_compile(self) -> FailedRun | None:
        """The first run whose compile failed (the project's sources do not compile here)."""
        return next((run for run in self.failed if run.compile), None)

    def problems(self) -> list[str]:
        """What was not made, each said with why."""
        failed = {run.trigger for run in self.failed} | {t for t, _ in self.skipped}
        made = {lib.site for lib in self.libraries} | {lib.trigger for lib in self.libraries}
        silent = dict.fromkeys(
            t.site
            for t in self.triggers
            if not t.code and t.site not in made and str(t) not in made and str(t) not in failed
        )
        idle = [t for t in self.triggers if t.code and str(t) not in made | failed]
        return [
            *(
                f"`{run.trigger}` failed{self._after(run.trigger)}: {run.error}"
                f"{_missing_hint(run.error, self._made_by(run.trigger))}"
                for run in self.failed
            ),
            *(
                f"`{trigger}` was not run: {importer} imports its module only under a condition "
                "of its own, false here (another platform's code)"
                for trigger, importer in self.skipped
            ),
            *(
                f"the compile at {site} did not run (what runs it ran without calling it: a "
                "condition of the project's own, such as an environment variable it reads)"
                for site in silent
            ),
            *(
                f"`{trigger}` (--first-use) ran and compiled nothing (its compiles are made "
                "by another call, or under a condition of the project's own, false here)"
                for trigger in idle
            ),
            *_unreached_problems([u for u in self.unreached if u.site not in made]),
        ]

    def _made_by(self, trigger: str) -> tuple[str, ...]:
        """The names of the libraries ``trigger`` made, each once."""
        return tuple(dict.fromkeys(lib.name for lib in self.libraries if lib.trigger == trigger))

    def _after(self, trigger: str) -> str:
        """`` after compiling 'a', 'b' (...)`` where ``trigger`` made libraries before it raised
        (torch-encoding's package import compiles, then needs a module the build lacks)."""
        names = self._made_by(trigger)
        if not names:
            return ""
        return (
            f" after compiling {', '.join(map(repr, names))} (what it would compile after "
            "that, if anything, was not made)"
        )

    def served(self, distribution: str) -> dict[str, list[dict[str, str]]]:
        """The guard's ``jit`` config: each name given ``load`` -> its builds in the wheel
        (``path`` in the site directory, ``key``)."""
        served: dict[str, list[dict[str, str]]] = {}
        for lib in self.libraries:
            path = f"{jit_folder(distribution)}/{lib.file.name}"
            served.setdefault(lib.name, []).append({"path": path, "key": lib.key})
        return served

    def note(self) -> str:
        """The summary's note on a wheel holding them."""
        made = ", ".join(f"'{lib.name}' ({lib.site})" for lib in self.libraries)
        problems = self.problems()
        skipped = {trigger for trigger, _ in self.skipped}
        ran = ", ".join(f"`{t}`" for t in self.triggers if str(t) not in skipped)
        return (
            "the project compiles its code when first used (torch.utils.cpp_extension); "
            f"those compiles were made in this build, by {ran}: "
            f"{made}, in the wheel, which hands them to its load() calls in place of compiling"
            + (f". Not made, or not usable: {'; '.join(problems)}" if problems else "")
        )

    def refusal(self) -> str:
        """The sentence for a refusal where nothing was made; "" where nothing was tried."""
        if not self.triggers and not self.unreached:
            return ""
        if not self.triggers:
            return (
                f"prebuild found nothing to run them ahead of time: {'; '.join(self.problems())}."
            )
        return (
            "prebuild ran them ahead of time ("
            + ", ".join(f"`{t}`" for t in self.triggers)
            + "), and none made a library: "
            + "; ".join(self.problems() or ["they compiled nothing"])
            + "."
        )


def _unreached_problems(unreached: list[Unreached]) -> list[str]:
    """Pure: each compile nothing reached, said with why; those of one place (a method holding
    two) said at once, with the call that makes them where its users' code can make it."""
    places: dict[tuple[str, str], list[str]] = {}
    for u in unreached:
        places.setdefault((u.why, u.example), []).append(u.site)
    said = []
    for (why, example), sites in places.items():
        said.append(
            (
                f"the compile at {sites[0]} runs"
                if len(sites) == 1
                else f"the compiles at {', '.join(sites)} run"
            )
            + f" only {why}"
            + (
                f" (give the call its users' code makes, with their arguments, and the build "
                f"makes {'it' if len(sites) == 1 else 'them'}: `--first-use '{example}'`)"
                if example
                else ""
            )
        )
    return said


def _missing_hint(error: str, compiled: tuple[str, ...] = ()) -> str:
    """Pure: what to do where a run failed on a module the build's environment lacks (the
    project's own requirement: running its code needs it, as its users' machines have it).
    One of the names its run had just ``compiled`` is no requirement: the project imports the
    module load() returned by its name (exllama 0.1.0's `from exllama_ext import ...`), which
    finds it only where loading it put it in sys.modules, as pybind11 2's modules did."""
    match = re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", error)
    if not match:
        return ""
    if match[1] in compiled:
        return (
            f" ('{match[1]}' is the module its load() had just returned, which the project "
            "imports by its name: that finds it only where loading it put it in sys.modules, "
            "as modules of pybind11 2 did; those of this torch's pybind11 do not. The "
            "project's own code fails so with this torch, whether it compiles or not)"
        )
    module = match[1].split(".")[0]
    if module in REMOVED_MODULES:  # stylegan3's dnnlib imports pkg_resources
        what, fix = REMOVED_MODULES[module]
        return f" (the project's code imports {module}, and {what}: {fix})"
    return (
        f" (running the project's code needs {module}: install it in this environment and "
        "build again)"
    )


def jit_folder(distribution: str) -> str:
    """Where a wheel keeps its first-use libraries: beside the guard that serves them."""
    return f"{guard_package(distribution)}/jit"


def interpreter_tag() -> str:
    """``cp311-cp311-linux_x86_64``: the tag setuptools gives a wheel with an extension module
    for the running Python."""
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"cp{version}-cp{version}{sys.abiflags}-{platform}"


def python_sources(wheel: Path) -> dict[str, str]:
    """Path -> text of a wheel's Python files (not its .dist-info's)."""
    with zipfile.ZipFile(wheel) as zf:
        return {
            name: zf.read(name).decode("utf-8", errors="replace")
            for name in zf.namelist()
            if name.endswith(".py") and ".dist-info/" not in name
        }


# A mend of sources that failed to compile (classic's mended_in, by api_mends): (the folder of
# the wheel's files, the compile's output) -> the texts of the files it changed there before
# and after, and the changes.
Mend = Callable[[Path, str], tuple[dict[str, str], dict[str, str], list[SourceChange]]]


# What a build's folder of first-use compiles holds besides them: the build it is for (the
# objects' key: torch, nvcc, Python, C++ standard) and the mends made in its copy of the wheel.
RECORD_FILE = "prebuild-first-use.json"


def compile_first_use(
    wheel: Path,
    env: Mapping[str, str],
    folder: Path,
    log: Path,
    step: Callable[[int, int, str], None] | None = None,
    mend: Mend | None = None,
    rounds: int = 3,
    key: Mapping[str, str] | None = None,
    given: Sequence[str] = (),
    find: bool = True,
    again: Callable[[str], None] | None = None,
) -> FirstUse:
    """Run the first-use compiles of ``wheel``, unpacked in ``folder``/root, in a child process
    with ``env`` over this process's variables (torch's extensions directory in ``folder``), its
    output appended to ``log``; ``step`` hears each compile step ninja reports. What runs them:
    the triggers read from its Python (where ``find``), then the code the user ``given``
    (``--first-use``). Where a compile fails and ``mend`` changes the sources for it (an API
    with an exact replacement), they run again (ninja compiles again what changed), ``rounds``
    times at most, ``again`` told why before each.

    What an earlier run left in ``folder`` for the same ``key`` (an interrupted or failed build
    in the same --build-dir) is kept, its mends made again: ninja compiles only what is missing
    or changed. Another key, or none, starts it empty."""
    triggers, unreached = first_use_triggers(python_sources(wheel)) if find else ([], [])
    triggers += [given_trigger(code) for code in given]
    if not triggers:
        return FirstUse(unreached=tuple(unreached))
    record = _read_record(folder)
    if key is None or record.get("key") != dict(key):
        shutil.rmtree(folder, ignore_errors=True)
        record = {}
    root, kept = folder / "root", (folder / "root").is_dir()
    folder.mkdir(parents=True, exist_ok=True)
    mends = unpack(wheel, root, record.get("mends", {}) if mend else {})
    _remove_stale_locks(wheel, folder)
    changes = [c for name, entry in mends.items() for c in recorded_changes(name, entry)]
    _write_record(folder, key, mends)
    env = {**env, "TORCH_EXTENSIONS_DIR": str(folder / "torch-extensions")}
    for _ in range(rounds):
        made = _run(root, triggers, unreached, env, log, step)
        if not made.failed_compile or mend is None:
            break
        before, texts, mended = mend(root, made.output)
        if not mended:
            break
        changes += mended
        mends = mends_recorded(mends, before, texts, mended)
        _write_record(folder, key, mends)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"\n==== prebuild: {len(mended)} change(s) mended its sources: run again\n")
        if again is not None:
            again(mended_again(mended))
    return replace(made, changes=tuple(changes), kept=kept)


def _remove_stale_locks(wheel: Path, folder: Path) -> None:
    """Delete the ``lock`` files torch's compile leaves in its build directories (the wheel's
    own files aside) where a run was killed in the middle of one: the next would wait for them
    for ever. None is live: the --build-dir's lock lets one build at a time use ``folder``."""
    with zipfile.ZipFile(wheel) as zf:
        own = {folder / "root" / name for name in zf.namelist()}
    for path in folder.rglob("lock"):
        if path.is_file() and path not in own:
            path.unlink()


def _read_record(folder: Path) -> dict:
    try:
        record = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(folder: Path, key: Mapping[str, str] | None, mends: dict) -> None:
    record = {"key": dict(key) if key is not None else None, "mends": mends}
    (folder / RECORD_FILE).write_text(json.dumps(record), encoding="utf-8")


def _run(
    root: Path,
    triggers: list[Trigger],
    unreached: list[Unreached],
    env: Mapping[str, str],
    log: Path,
    step: Callable[[int, int, str], None] | None,
) -> FirstUse:
    """One run of the child over the unpacked wheel in ``root``."""
    spec, out = root.with_name(f"{root.name}-spec.json"), root.with_name(f"{root.name}-out.json")
    out.unlink(missing_ok=True)
    spec.write_text(
        json.dumps(
            {
                "root": str(root),
                "prebuild": str(Path(prebuild.__file__).parent.parent),
                "triggers": [
                    [t.module, t.function, t.call, t.only_after, str(t), t.code] for t in triggers
                ],
            }
        )
    )
    start = log_size(log)
    with open(log, "a", encoding="utf-8") as f, follow_steps(log, step, str(root)):
        f.write("\n==== prebuild: the compiles it makes when first used, ahead of time\n\n")
        f.flush()
        processes.run(
            [sys.executable, jit_ahead_run.__file__, str(spec), str(out)],
            cwd=root,
            stdin=subprocess.DEVNULL,  # a project asking for input gets none, never a hang
            # a guard of an earlier wheel of it, installed here, would serve its own libraries
            env={**os.environ, **env, ALLOW_ENV: "1"},
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    try:
        made = json.loads(out.read_text())
    except (OSError, ValueError):  # it died before writing: its output says why
        failed = [
            {"trigger": str(t), "error": f"the run stopped (its log: {log})"} for t in triggers
        ]
        made = {"built": [], "failed": failed, "skipped": []}
    libraries: dict[tuple[str, str], FirstUseLibrary] = {}
    for entry in made["built"]:
        site = entry["site"]
        path, _, line = site.rpartition(":")
        if Path(path).is_relative_to(root):
            site = f"{Path(path).relative_to(root)}:{line}"
        library = FirstUseLibrary(
            entry["name"], entry["key"], Path(entry["file"]), site, entry.get("trigger", "")
        )
        libraries.setdefault((library.name, library.key), library)
    return FirstUse(
        tuple(libraries.values()),
        tuple(triggers),
        tuple(FailedRun(f["trigger"], f["error"], f.get("compile") or "") for f in made["failed"]),
        tuple(unreached),
        tuple((s["trigger"], s["importer"]) for s in made["skipped"]),
        # the wheel's files named as in the wheel: the copy they were compiled from is gone
        log_since(log, start).replace(f"{root}/", ""),
    )


def unpack(wheel: Path, root: Path, mends: Mapping[str, dict] | None = None) -> dict[str, dict]:
    """The wheel's files in ``root``, what is there kept: a file already as it should be is left
    untouched (its time too: what an earlier run compiled of it stays up to date), a new one
    gets its time in the wheel (older than what a compile makes of it, as in the project's
    copy), a changed one the time of now (newer than any object made of it before). ``mends``:
    file -> {source: the sha256 of the wheel's text it was made from, text: the mended text}, an
    earlier run's; one whose file is still that text is made again. Returns those made."""
    made: dict[str, dict] = {}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            data = zf.read(info)
            mend = (mends or {}).get(info.filename)
            text = data.decode("utf-8", errors="surrogateescape") if mend else ""
            if mend and (mended := recorded_text(mend, text)) is not None:
                data = mended.encode("utf-8")
                made[info.filename] = mend
            path = root / info.filename
            if path.is_file() and path.read_bytes() == data:
                continue
            new = not path.exists()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if new and info.filename not in made:
                when = time.mktime((*info.date_time, 0, 0, -1))
                os.utime(path, (when, when))
    return made


def with_first_use(wheel: Path, first_use: FirstUse, distribution: str, out_dir: Path) -> Path:
    """A copy of ``wheel`` in ``out_dir`` holding ``first_use``'s libraries in its jit folder,
    tagged for this Python (their modules are this Python's extension modules)."""
    folder = jit_folder(distribution)

    def add(root: Path) -> None:
        (root / folder).mkdir(parents=True, exist_ok=True)
        for lib in first_use.libraries:
            target = root / folder / lib.file.name
            shutil.copyfile(lib.file, target)
            target.chmod(0o755)

    return rewrite_wheel(wheel, out_dir, tag=interpreter_tag(), edit=add)
