"""What a classic project's build keeps of its objects, in its copy's setuptools ``build/``:
from one wheel to the next of a run, and from one run to the next in the same ``--build-dir``
(an interrupted or failed build resumes: ninja compiles only what is missing or changed).

The shim gives every arch the same nvcc command line (it adds the wheel's ``-gencode`` itself),
so ninja cannot tell an object made for other archs from one made for this wheel's: a record
in ``build/`` (``STATE_FILE``) says which wheel nvcc's objects are for, and which calls made the
objects there. It is written before a wheel's compiles start and names the logs the shim
appends each call to as it starts, so it holds however the build ended (Ctrl-C, a kill, a
compile error). Whatever the record cannot vouch for is deleted: objects made for another
wheel's archs, by another torch, nvcc, Python, C++ standard or NVCC_APPEND_FLAGS
(``ObjectsKey``), or of another project.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from prebuild.runtime.manifest import CompilerCall
from prebuild.tool.builder.nvcc_shim import is_query, option_value

STATE_FILE = "prebuild-objects.json"
STATE_VERSION = 1

# How nvcc is told where to write (torch's ninja build and hand-written builds alike).
NVCC_OUTPUT_OPTIONS = ("-o", "--output-file")


def logged_calls(log: Path) -> list[CompilerCall]:
    """The calls the shim logged (nvcc_shim.main), in order; none if it wrote no log. A line cut
    short (the process killed as it wrote) is skipped."""
    if not log.exists():
        return []
    calls = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            call = json.loads(line)
            calls.append(CompilerCall(tuple(call["given"]), tuple(call["run"])))
        except (ValueError, KeyError, TypeError):
            continue
    return calls


def calls_by_object(calls: list[CompilerCall]) -> dict[str, CompilerCall]:
    """The compiling calls (``-c``) by the object each wrote (``-o``), the last call for each."""
    by_object = {}
    for call in calls:
        written = option_value(list(call.run), ("-o",))
        if "-c" in call.run and written:
            by_object[written] = call
    return by_object


def nvcc_outputs(calls: list[list[str]]) -> list[Path] | None:
    """The files these nvcc calls (each one's arguments) wrote; None when a compiling call's
    output cannot be told: no output option, or a relative path (the call's directory is
    unknown). Queries (``--version``) write nothing."""
    outputs = []
    for args in calls:
        if is_query(args):
            continue
        found = option_value(args, NVCC_OUTPUT_OPTIONS)
        if found is None or not Path(found).is_absolute():
            return None
        outputs.append(Path(found))
    return outputs


def keep_host_objects(build: Path, nvcc_wrote: list[Path] | None) -> int:
    """Prepare setuptools' ``build/`` for the next build of the same copy; returns how many
    objects were kept (0: it starts empty).

    Kept: the objects in ``build/temp.*``. torch's ninja build recompiles one when its command
    line or an input changed (ninja records both), and without ninja setuptools compiles every
    source anyway. Deleted: ``nvcc_wrote`` (an object made for other archs may look up to date:
    the shim, or a project with a hard-coded ``-gencode``, compiles every arch with the same
    command), and the rest of ``build/`` (the linked extension, which setuptools would
    otherwise call up to date). When what nvcc wrote is unknown, or lies outside
    ``build/temp.*``, nothing is kept."""
    temps = [d.resolve() for d in build.glob("temp.*") if d.is_dir()] if build.is_dir() else []
    inside = nvcc_wrote is not None and all(
        any(p.resolve().is_relative_to(t) for t in temps) for p in nvcc_wrote
    )
    if not temps or not inside:
        shutil.rmtree(build, ignore_errors=True)
        return 0
    for entry in build.iterdir():
        if not entry.name.startswith("temp."):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for path in nvcc_wrote:
        path.unlink(missing_ok=True)
    return sum(1 for t in temps for p in t.rglob("*.o") if p.is_file())


@dataclass(frozen=True)
class ObjectsKey:
    """What a build's objects depend on besides their sources, their compile commands (which
    ninja compares) and the archs (the record's ``label``): a kept object made with anything
    else is not reused. The project is named too: one ``--build-dir`` may serve several."""

    project: str  # project.Project.identity
    torch: str  # its version string, CUDA included (2.14.1+cu130)
    nvcc: str  # its toolkit's root and version
    python: str  # the interpreter that builds (its path and version)
    cxx_standard: str
    # NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS: the shim adds them to each nvcc call, after
    # ninja compared its command (empty in the records of prebuilds before them)
    nvcc_env_flags: str = ""

    def to_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ObjectsRecord:
    """``build/prebuild-objects.json``: the wheel whose nvcc objects are in ``build/``, and the
    calls behind its objects: those made before its build started (``nvcc_calls``,
    ``host_calls``), and those its shim logs name (``logs``), appended as they run."""

    key: ObjectsKey
    label: str  # the wheel's local version label (flags.local_version_label)
    nvcc_calls: tuple[CompilerCall, ...] = ()
    host_calls: tuple[CompilerCall, ...] = ()
    logs: tuple[str, str] = ("", "")  # the shim's nvcc log, the host compiler's

    def calls(self) -> tuple[list[CompilerCall], list[CompilerCall]]:
        """Every nvcc and host compiler call behind the objects: those made before, then those
        the logs hold (a call compiling an object again replaces the one before)."""
        nvcc_log, cxx_log = (logged_calls(Path(log)) if log else [] for log in self.logs)
        return [*self.nvcc_calls, *nvcc_log], [*self.host_calls, *cxx_log]

    def to_json(self) -> str:
        def listed(calls):
            return [{"given": list(c.given), "run": list(c.run)} for c in calls]

        return json.dumps(
            {
                "version": STATE_VERSION,
                "key": self.key.to_dict(),
                "label": self.label,
                "nvcc_calls": listed(self.nvcc_calls),
                "host_calls": listed(self.host_calls),
                "logs": list(self.logs),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> ObjectsRecord | None:
        """The record, or None where it is not one this prebuild wrote (then nothing is kept)."""

        def calls(items):
            return tuple(CompilerCall(tuple(c["given"]), tuple(c["run"])) for c in items)

        try:
            data = json.loads(text)
            if data.get("version") != STATE_VERSION:
                return None
            nvcc_log, cxx_log = data["logs"]
            return cls(
                ObjectsKey(**data["key"]),
                str(data["label"]),
                calls(data["nvcc_calls"]),
                calls(data["host_calls"]),
                (str(nvcc_log), str(cxx_log)),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


@dataclass(frozen=True)
class Reuse:
    """What to keep of ``build/`` for the next wheel (``reuse``)."""

    nvcc_wrote: list[Path] | None  # deleted; None: nothing is kept
    nvcc_calls: dict[str, CompilerCall]  # behind the nvcc objects kept, by object
    host_calls: dict[str, CompilerCall]  # behind the host objects kept, by object
    resumed: bool  # the same wheel's objects, from an earlier run


def reuse(record: ObjectsRecord | None, key: ObjectsKey, label: str) -> Reuse:
    """Pure: what the next build of the wheel ``label`` keeps, after the build ``record`` says
    made the objects in ``build/``. The same wheel (an earlier run that stopped) keeps them all;
    another wheel keeps the host compiler's only; another key, or no record, nothing."""
    if record is None or record.key != key:
        return Reuse(None, {}, {}, resumed=False)
    nvcc, host = record.calls()
    if record.label == label:
        return Reuse([], calls_by_object(nvcc), calls_by_object(host), resumed=True)
    # No nvcc call logged (a project running an nvcc of its own): what it wrote is unknown.
    wrote = nvcc_outputs([list(c.run) for c in nvcc]) if nvcc else None
    return Reuse(wrote, {}, calls_by_object(host), resumed=False)


def read_record(build: Path) -> ObjectsRecord | None:
    path = build / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return ObjectsRecord.from_json(text)


def ninja_logged(build: Path) -> bool:
    """Whether a build in ``build/`` ran ninja, whose log (``.ninja_log``, beside torch's
    ``build.ninja`` in ``build/temp.*``) tells the next what it need not compile: setuptools
    without ninja compiles every source whatever objects are there (DeepSpeed 0.19.8)."""
    return build.is_dir() and any(build.rglob(".ninja_log"))


def prepare_build(
    build: Path, key: ObjectsKey, label: str, logs: tuple[Path, Path]
) -> tuple[int, Reuse]:
    """Make ``build/`` ready for the wheel ``label``, whose compiles the shim logs in ``logs``
    (nvcc's, the host compiler's; not yet written): what the record allows is kept, the rest
    deleted, and the new record written. Returns how many objects were kept, and what was.
    Call it before the logs' directory is emptied: the record may name the same logs."""
    plan = reuse(read_record(build), key, label)
    kept = keep_host_objects(build, plan.nvcc_wrote)
    if not kept:
        plan = Reuse(None, {}, {}, resumed=False)
    build.mkdir(parents=True, exist_ok=True)
    record = ObjectsRecord(
        key,
        label,
        tuple(plan.nvcc_calls.values()),
        tuple(plan.host_calls.values()),
        (str(logs[0]), str(logs[1])),
    )
    (build / STATE_FILE).write_text(record.to_json(), encoding="utf-8")
    return kept, plan
