"""``prebuild doctor``: why prebuild does or does not run here, in one report.

Facts are gathered without nvcc and without a CUDA context in this process (GPUs through
NVML; the libraries are test-loaded in a short-lived child process); ``diagnose``,
``op_verdicts`` and ``project_checks`` are pure and turn facts into checks through the
loader's own rules (``prebuild.runtime.compat``). Besides prebuild's own kernels it checks
every installed distribution that carries a prebuild manifest (another project's wheel
built by ``prebuild wheel --arch ... PROJECT``) against torch and the GPUs. It also finds
the JIT lock files that other packages' ``torch.utils.cpp_extension`` builds leave under
``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``, which make later builds wait
forever.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from prebuild.runtime import compat
from prebuild.runtime.arch import CodeKind, arch_for_capability, format_capability, select_code
from prebuild.runtime.manifest import (
    MANIFEST_NAME,
    PROJECT_MANIFEST_NAME,
    Manifest,
    ManifestError,
    ProjectManifest,
    read_manifest,
    verify_libraries,
)
from prebuild.runtime.versions import release
from prebuild.tool.builder.config import MIN_TORCH_TARGET
from prebuild.tool.gpus import GpuQuery, TorchInfo

OK, WARN, FAIL = "ok", "warn", "fail"
UNKNOWN = "unknown"  # could not be found out here; the fix says how


@dataclass(frozen=True)
class Check:
    area: str
    status: str  # ok, warn or fail
    message: str
    fix: str = ""


# --- stale JIT locks ------------------------------------------------------------------------


# A JIT build of a large extension takes minutes (gsplat: 12 min on 2 cores); a lock file
# older than this that no process holds is left over.
STALE_AFTER_SECONDS = 30 * 60


@dataclass(frozen=True)
class JitLock:
    path: Path
    age_seconds: float
    holders: tuple[tuple[int, str], ...] = ()  # (pid, command line) of live processes

    @property
    def stale(self) -> bool:
        """Held by no live process and older than any build: older torch versions' lock
        files are created and closed, so a young one may belong to a build in progress."""
        return not self.holders and self.age_seconds >= STALE_AFTER_SECONDS

    @property
    def state(self) -> str:
        if self.holders:
            return "; ".join(f"held by pid {pid}: {cmd[:60]}" for pid, cmd in self.holders)
        return "stale" if self.stale else "recent: a build may still be running"


def extension_roots(env: dict[str, str], home: Path) -> list[Path]:
    """Where torch's JIT builder keeps extensions: TORCH_EXTENSIONS_DIR, else the cache."""
    roots = []
    if env.get("TORCH_EXTENSIONS_DIR"):
        roots.append(Path(env["TORCH_EXTENSIONS_DIR"]))
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    roots.append(cache / "torch_extensions")
    unique: list[Path] = []
    for root in roots:
        if root not in unique:
            unique.append(root)
    return unique


def parse_proc_locks(text: str) -> dict[int, set[int]]:
    """Pure: ``/proc/locks`` as {inode: pids holding a lock on it}.

    A line: ``1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`` (``->`` marks a waiter)."""
    held: dict[int, set[int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if "->" in parts:
            continue
        try:
            pid = int(parts[4])
            inode = int(parts[5].rsplit(":", 1)[1])
        except (IndexError, ValueError):
            continue
        held.setdefault(inode, set()).add(pid)
    return held


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return (
        " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or f"pid {pid}"
    )


def _open_by(paths: set[Path]) -> dict[Path, set[int]]:
    """Which live processes have each path open (their /proc/PID/fd links)."""
    found: dict[Path, set[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    target = Path(os.readlink(fd))
                except OSError:
                    continue
                if target in paths:
                    found.setdefault(target, set()).add(int(proc.name))
        except OSError:
            continue
    return found


def find_jit_locks(roots: list[Path], now: float | None = None) -> list[JitLock]:
    """Every ``lock`` file under the roots, with its age and the live processes holding it
    (an OS-level lock in /proc/locks, or the file open)."""
    now = time.time() if now is None else now
    paths = []
    for root in roots:
        if root.is_dir():
            paths.extend(
                p
                for p in root.rglob("*")
                if p.is_file() and (p.name == "lock" or p.suffix == ".lock")
            )
    if not paths:
        return []
    try:
        locks = parse_proc_locks(Path("/proc/locks").read_text())
    except OSError:
        locks = {}
    opened = _open_by({p.resolve() for p in paths})
    out = []
    for path in sorted(paths):
        try:
            st = path.stat()
        except OSError:
            continue  # removed meanwhile
        pids = locks.get(st.st_ino, set()) | opened.get(path.resolve(), set())
        holders = tuple(
            (pid, cmd) for pid in sorted(pids) if pid != os.getpid() and (cmd := _cmdline(pid))
        )
        out.append(JitLock(path, max(0.0, now - st.st_mtime), holders))
    return out


def clear_command(locks: list[JitLock]) -> str:
    """The command that removes the stale locks only (none is held by a live process)."""
    stale = [str(lock.path) for lock in locks if lock.stale]
    return "rm -f -- " + " ".join(shlex.quote(p) for p in stale) if stale else ""


# --- facts ----------------------------------------------------------------------------------


@dataclass
class Facts:
    python: str
    torch: TorchInfo
    package_dir: Path
    manifest: Manifest | None
    install_error: str  # manifest unreadable or libraries damaged; "" when fine
    gpus: GpuQuery
    locks: list[JitLock] = field(default_factory=list)
    load_error: str | None = None  # None: not checked; "": loaded fine
    ops: tuple[str, ...] = ()
    strict: bool = False
    projects: list[InstalledProject] = field(default_factory=list)
    variant: str | None = None  # the PEP 825 variant wheel prebuild was installed from


def installed_package() -> tuple[Path, Manifest | None, str]:
    """The prebuild package directory, its manifest, and what is wrong with it (or "")."""
    import prebuild

    directory = Path(prebuild.__file__).resolve().parent
    try:
        manifest = read_manifest(directory)
    except ManifestError as exc:
        return directory, None, str(exc)
    try:
        verify_libraries(directory, manifest)
    except ManifestError as exc:
        return directory, manifest, str(exc)
    return directory, manifest, ""


LOAD_SCRIPT = "from prebuild.ops import *; print('loaded')"  # every library and op family
# Another project's extension modules, after torch (whose libraries they need loaded first).
IMPORT_SCRIPT = "import importlib, sys, torch\nfor m in sys.argv[1:]: importlib.import_module(m)\nprint('loaded')"
# A native project's libraries, through the loader its wheel carries (argv: package, directory).
NATIVE_LOAD_SCRIPT = (
    "import importlib, sys, torch\n"
    "importlib.import_module(sys.argv[1] + '._prebuild_runtime').load_package(sys.argv[2])\n"
    "print('loaded')"
)


def load_check(script: str = LOAD_SCRIPT, args: tuple[str, ...] = (), timeout: float = 300) -> str:
    """Load libraries in a short-lived child (this process stays free of them): "" when
    they load, else the child's last error line."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"loading took more than {timeout:.0f} s"
    if proc.returncode == 0 and proc.stdout.strip().endswith("loaded"):
        return ""
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


@dataclass(frozen=True)
class InstalledProject:
    """An installed distribution whose wheel prebuild built: another project's
    (``.dist-info/prebuild.json``, a ``ProjectManifest``) or a native project's (its package's
    ``_manifest.json``, a ``Manifest``)."""

    name: str
    version: str
    manifest: ProjectManifest | Manifest | None
    problem: str = ""  # the manifest unreadable, or libraries missing or altered; "" when fine
    modules: tuple[str, ...] = ()  # its extension modules
    load_error: str | None = None  # None: not checked; "": imported fine
    variant: str | None = None  # a PEP 825 variant wheel's label

    @property
    def title(self) -> str:
        return f"{self.name} {self.version}" + (
            f" (variant {self.variant})" if self.variant else ""
        )


def extension_module(file: str) -> str | None:
    """Pure: the module a library path inside a wheel would be (``pkg/_C.cpython-311-x86_64-linux-gnu.so``
    -> ``pkg._C``); None when it cannot be one (``pkg/lib/libfoo.so.1``). Whether it is one,
    its ``PyInit_`` symbol says (``installed_projects``)."""
    for suffix in sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True):
        if file.endswith(suffix):
            parts = file[: -len(suffix)].split("/")
            return ".".join(parts) if all(p.isidentifier() for p in parts) else None
    return None


def installed_projects(check_load: bool = True) -> list[InstalledProject]:
    """Every installed distribution carrying a prebuild manifest, its libraries checked
    (sha256 and archs, by ``prebuild.tool.inspection``) and, when intact, imported in a child."""
    from prebuild.tool.inspection import InspectionError, exports_symbol, inspect_distribution

    found: dict[str, InstalledProject] = {}
    for dist in importlib.metadata.distributions():
        name = str(dist.metadata["Name"] or "")
        if not name or canonicalize_name(name) in found:
            continue  # shadowed by the same name earlier on sys.path
        if dist.read_text(PROJECT_MANIFEST_NAME) is None:
            native = installed_native_project(dist, check_load)
            if native is not None:
                found[canonicalize_name(name)] = native
            continue
        try:
            report = inspect_distribution(name)
        except (ManifestError, InspectionError, OSError) as exc:
            found[canonicalize_name(name)] = InstalledProject(name, dist.version, None, str(exc))
            continue
        manifest = report.manifest
        assert isinstance(manifest, ProjectManifest)
        problem = "; ".join(f"{d.file}: {d.message}" for d in report.disagreements)
        modules: tuple[str, ...] = ()
        if not problem:  # every library is there, as built
            modules = tuple(
                m
                for lib in manifest.libraries
                if (m := extension_module(lib.file))
                and exports_symbol(
                    Path(str(dist.locate_file(lib.file))).read_bytes(),
                    f"PyInit_{m.rsplit('.', 1)[-1]}",
                )
            )
        load_error = load_check(IMPORT_SCRIPT, modules) if check_load and modules else None
        found[canonicalize_name(name)] = InstalledProject(
            name, dist.version, manifest, problem, modules, load_error, report.variant_label
        )
    return sorted(found.values(), key=lambda p: canonicalize_name(p.name))


def _editable(dist) -> bool:
    """Installed with ``pip install -e`` (PEP 610's ``direct_url.json``)."""
    try:
        return bool(
            json.loads(dist.read_text("direct_url.json") or "{}")
            .get("dir_info", {})
            .get("editable")
        )
    except (ValueError, AttributeError):
        return False


def native_package_dir(dist) -> Path | None:
    """The directory holding a native project's ``_manifest.json``: the one its files list (an
    installed wheel) or, for an editable install (its RECORD lists only what puts its source on
    sys.path), the one under its top-level packages (``top_level.txt``) as sys.path finds them.
    None when there is not exactly one."""
    from prebuild.tool.inspection import package_manifests

    manifests = package_manifests([str(f) for f in dist.files or ()])
    if manifests or not _editable(dist):
        return Path(str(dist.locate_file(manifests[0]))).parent if len(manifests) == 1 else None
    found: list[Path] = []
    for top in (dist.read_text("top_level.txt") or "").split():
        try:
            spec = (
                importlib.util.find_spec(top) if top.isidentifier() else None
            )  # a top-level name: imports nothing
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            found += [path.parent for path in Path(location).rglob(MANIFEST_NAME)]
    return found[0] if len(set(found)) == 1 else None


def installed_native_project(dist, check_load: bool) -> InstalledProject | None:
    """A native project's distribution (a package ``_manifest.json`` among its files, or in
    its editable source) other than this prebuild's own package (the "install" rows): its
    libraries checked (sha256 and archs) and, when intact, loaded by its own loader in a child."""
    from prebuild.tool.inspection import (
        InspectionError,
        inspect_directory,
        installed_variant_json,
        with_variant,
    )

    directory = native_package_dir(dist)
    if directory is None:
        return None
    if directory.resolve() == Path(__file__).resolve().parents[1]:
        return None  # this prebuild's own kernels: diagnosed above
    name = str(dist.metadata["Name"])
    try:
        report = with_variant(inspect_directory(directory), installed_variant_json(dist), None)
    except (ManifestError, InspectionError, OSError) as exc:
        return InstalledProject(name, dist.version, None, str(exc))
    manifest = report.manifest
    assert isinstance(manifest, Manifest)
    problem = "; ".join(f"{d.file}: {d.message}" for d in report.disagreements)
    runtime = f"{manifest.package}._prebuild_runtime"
    load_error = None
    if check_load and not problem:
        load_error = load_check(NATIVE_LOAD_SCRIPT, (manifest.package, str(directory)))
    return InstalledProject(
        name, dist.version, manifest, problem, (runtime,), load_error, report.variant_label
    )


def gather(env: dict[str, str] | None = None, check_load: bool = True) -> Facts:
    from prebuild.ops import OPS
    from prebuild.runtime.loader import STRICT_ENV
    from prebuild.tool.gpus import query_gpus, torch_info

    env = dict(os.environ if env is None else env)
    directory, manifest, install_error = installed_package()
    variant, variant_problem = own_variant(manifest)
    install_error = "; ".join(filter(None, [install_error, variant_problem]))
    home = Path(env.get("HOME") or Path.home())
    return Facts(
        python=f"{platform.python_version()} ({sys.executable})",
        torch=torch_info(),
        package_dir=directory,
        manifest=manifest,
        install_error=install_error,
        gpus=query_gpus(env),
        locks=find_jit_locks(extension_roots(env, home)),
        load_error=load_check()
        if check_load and manifest is not None and not install_error
        else None,
        ops=tuple(sorted(OPS)),
        strict=env.get(STRICT_ENV, "") == "1",
        projects=installed_projects(check_load),
        variant=variant,
    )


def own_variant(manifest: Manifest | None) -> tuple[str | None, str]:
    """The label of the PEP 825 variant wheel prebuild was installed from (None: another kind
    of install), and how its variant.json disagrees with the manifest ("" when it agrees)."""
    from prebuild.tool.inspection import (
        InspectionError,
        installed_variant_json,
        variant_disagreements,
    )

    try:
        document = installed_variant_json(importlib.metadata.distribution("prebuild"))
    except importlib.metadata.PackageNotFoundError:
        return None, ""
    except InspectionError as exc:
        return None, str(exc)
    if document is None:
        return None, ""
    label = next(iter(document.get("variants", {})), None)
    problems = variant_disagreements(document, None, manifest) if manifest is not None else []
    return label, "; ".join(f"{d.file}: {d.message}" for d in problems)


# --- verdicts (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class OpVerdict:
    op: str
    device: str
    code: str  # "SASS sm_80", "PTX compute_90 (driver JIT)", "not covered"
    status: str
    reason: str


def _archs(m: Manifest) -> str:
    return ", ".join([a.sm for a in m.sass_archs] + [a.compute for a in m.ptx_archs]) or "none"


def _cpu_torch_note(facts: Facts) -> str | None:
    """Set when torch is a CPU build but the wheel carries CUDA kernels."""
    m, t = facts.manifest, facts.torch
    if (
        m is None
        or not m.has_cuda
        or t.version is None
        or t.cuda is not None
        or m.cuda_version is None
    ):
        return None
    return compat.cpu_torch_note(t.version, m.cuda_version, _archs(m))


def op_verdicts(facts: Facts) -> list[OpVerdict]:
    """For each op: whether it runs on the CPU, and for each GPU what the driver will run,
    by the loader's own rules."""
    m = facts.manifest
    if m is None:
        return []
    cpu_fails = bool(facts.install_error or facts.load_error)
    out = [
        OpVerdict(
            op,
            "cpu",
            "CPU kernel",
            FAIL if cpu_fails else OK,
            (facts.install_error or facts.load_error or "") if cpu_fails else "",
        )
        for op in facts.ops
    ]
    cpu_torch = _cpu_torch_note(facts)
    for gpu in facts.gpus.gpus:
        device = f"cuda:{gpu.index} {gpu.name} ({format_capability(gpu.capability)})"
        choice = select_code(gpu.capability, m.sass_archs, m.ptx_archs)
        verdict = compat.device_verdict(m, gpu.index, gpu.name, gpu.capability, facts.strict)
        if choice.kind is CodeKind.SASS:
            code, status, reason = f"SASS {choice.arch.sm}", OK, "machine code for this GPU"  # type: ignore[union-attr]
        elif choice.kind is CodeKind.PTX:
            code = f"PTX {choice.arch.compute} (driver JIT)"  # type: ignore[union-attr]
            status = FAIL if verdict.error else WARN
            reason = str(verdict.error or verdict.warning)
        else:
            code, status, reason = "not covered", FAIL, str(verdict.error)
        if not m.has_cuda:
            code, status, reason = "no CUDA kernels", FAIL, str(compat.no_cuda_kernels_error(m))
        elif cpu_torch:
            status = FAIL
            reason = f"{cpu_torch}. For the GPU: {compat.cuda_torch_command(m.cuda_version or '', m.torch_target)}"
        for op in facts.ops:
            out.append(OpVerdict(op, device, code, status, reason))
    return out


def diagnose(facts: Facts) -> list[Check]:
    checks = [Check("python", OK, facts.python)]
    t, m, g = facts.torch, facts.manifest, facts.gpus
    if t.version is None:
        checks.append(
            Check(
                "torch",
                FAIL,
                t.note,
                f"pip install 'torch>={m.torch_target if m else MIN_TORCH_TARGET}'",
            )
        )
    else:
        abi = {True: "cxx11 ABI", False: "pre-cxx11 ABI", None: "ABI unknown"}[t.cxx11_abi]
        checks.append(
            Check("torch", OK, f"{t.version}, CUDA {t.cuda or 'none (CPU build)'}, {abi}")
        )
    if m is None:
        checks.append(
            Check(
                "install",
                FAIL,
                f"{facts.package_dir}: {facts.install_error}",
                "pip install --force-reinstall --no-deps <the prebuild .whl>",
            )
        )
    else:
        archs = ", ".join([a.sm for a in m.sass_archs] + [a.compute for a in m.ptx_archs]) or "none"
        checks.append(
            Check(
                "install",
                FAIL if facts.install_error else OK,
                f"prebuild {m.package_version}"
                + (f" (variant {facts.variant})" if facts.variant else "")
                + f" in {facts.package_dir}: CUDA {m.cuda_version or 'none'}, "
                f"archs {archs}, torch target {m.torch_target}"
                + (f"; {facts.install_error}" if facts.install_error else ""),
                "pip install --force-reinstall --no-deps <the prebuild .whl>"
                if facts.install_error
                else "",
            )
        )
        if t.version is not None:
            too_old = compat.torch_version_error(m, t.version)
            if too_old:
                checks.append(
                    Check(
                        "torch vs wheel",
                        FAIL,
                        str(too_old),
                        f"pip install 'torch>={m.torch_target}'",
                    )
                )
            cpu_torch = _cpu_torch_note(facts)
            if cpu_torch and m.cuda_version and not too_old:
                checks.append(
                    Check(
                        "torch vs wheel",
                        WARN,
                        cpu_torch,
                        compat.cuda_torch_command(m.cuda_version, m.torch_target),
                    )
                )
            cuda_error = compat.cuda_major_error(m, t.cuda)
            if cuda_error:
                checks.append(
                    Check("torch vs wheel", FAIL, str(cuda_error), "prebuild install --dry-run")
                )
        if m.cuda_version and g.driver_cuda:
            fits = compat.driver_supports(m.cuda_version, g.driver_cuda)
            checks.append(
                Check(
                    "driver vs wheel",
                    OK if fits else FAIL,
                    f"driver {g.driver_version} supports CUDA {g.driver_cuda}; the wheel is CUDA {m.cuda_version}",
                    ""
                    if fits
                    else f"update the NVIDIA driver to one for CUDA {m.cuda_version}, "
                    "or install a wheel for an older CUDA (prebuild install)",
                )
            )
    if facts.load_error is not None:
        checks.append(
            Check(
                "load",
                FAIL if facts.load_error else OK,
                facts.load_error or "the libraries load (checked in a child process)",
            )
        )
    if g.gpus:
        names = ", ".join(
            f"cuda:{x.index} {x.name} ({format_capability(x.capability)})" for x in g.gpus
        )
        checks.append(Check("gpus", OK, names))
    elif not g.listed:
        fix = (
            "pip install nvidia-ml-py (lists GPUs through the driver, without a CUDA context)"
            if g.source == "none"
            else "on a machine with an NVIDIA GPU, install or repair its driver (nvidia-smi must work); "
            "on a machine without one there is nothing to do"
        )
        checks.append(Check("gpus", UNKNOWN, f"cannot be listed: {g.note}", fix))
    else:
        checks.append(Check("gpus", OK, f"none visible: {g.note}" if g.note else "none visible"))
    stale = [lock for lock in facts.locks if lock.stale]
    if stale:
        checks.append(
            Check(
                "jit locks",
                WARN,
                f"{len(stale)} stale torch JIT lock file(s), held by no process: other packages' "
                "JIT builds will wait on them forever (prebuild never uses them)",
                clear_command(facts.locks),
            )
        )
    elif facts.locks:
        checks.append(
            Check(
                "jit locks",
                OK,
                f"{len(facts.locks)} JIT lock file(s), held by a live or recent build",
            )
        )
    for project in facts.projects:
        checks.extend(project_checks(project, t, g))
    return checks


def _driver_check(area: str, wheel_cuda: str | None, gpus: GpuQuery) -> list[Check]:
    """A FAIL row when the driver is older than the CUDA the wheel was built with."""
    if (
        not wheel_cuda
        or not gpus.driver_cuda
        or compat.driver_supports(wheel_cuda, gpus.driver_cuda)
    ):
        return []
    return [
        Check(
            area,
            FAIL,
            f"built with CUDA {wheel_cuda}; the driver supports CUDA {gpus.driver_cuda} at most",
            f"update the NVIDIA driver to one for CUDA {wheel_cuda}",
        )
    ]


def project_checks(p: InstalledProject, torch: TorchInfo, gpus: GpuQuery) -> list[Check]:
    """Pure: whether another project's prebuilt wheel runs here. Its libraries use torch's C++
    ABI, so they need the torch minor release they were built against, a CUDA build of it
    with the same CUDA major, a driver for that CUDA, and SASS (or PTX) for every GPU."""
    area = p.name
    reinstall = (
        f"pip install --force-reinstall --no-deps <the {p.name} wheel>, "
        f"or prebuild install {p.name} --from SITE"
    )
    m = p.manifest
    if m is None:
        return [Check(area, FAIL, f"{p.name} {p.version}: {p.problem}", reinstall)]
    if isinstance(m, Manifest):
        return native_checks(p, m, torch, gpus, reinstall)
    archs = ", ".join([a.sm for a in m.sass_archs] + [a.compute for a in m.ptx_archs]) or "none"
    checks = [
        Check(
            area,
            FAIL if p.problem else OK,
            f"{p.title}: {m.kind} build for torch {m.torch_minor} (built with {m.torch}), "
            f"CUDA {m.cuda}, archs {archs}" + (f"; {p.problem}" if p.problem else ""),
            reinstall if p.problem else "",
        )
    ]
    need_archs = (
        ",".join(sorted({arch_for_capability(g.capability).sm for g in gpus.gpus})) or "sm_XX"
    )
    rebuild = f"prebuild wheel --arch {need_archs} {p.name}"
    if torch.version is None:
        checks.append(
            Check(
                area,
                FAIL,
                f"torch is not installed; {p.name} needs torch {m.torch_minor}",
                f"pip install 'torch=={m.torch_minor}.*'",
            )
        )
        return checks
    if release(torch.version)[:2] != release(m.torch)[:2]:
        checks.append(
            Check(
                area,
                FAIL,
                f"built for torch {m.torch_minor}; torch {torch.version} is installed: its C++ ABI "
                "differs, so importing fails (undefined symbol) or misbehaves",
                f"pip install 'torch=={m.torch_minor}.*', or build it for this torch: {rebuild}",
            )
        )
    elif torch.cuda is None:
        checks.append(
            Check(
                area,
                FAIL,
                f"torch {torch.version} is a CPU build: {p.name}'s CUDA extension links torch's CUDA "
                "libraries and cannot load with it",
                compat.cuda_torch_command(m.cuda, m.torch_minor, same_minor=True),
            )
        )
    elif not compat.same_cuda_major(m.cuda, torch.cuda):
        checks.append(
            Check(
                area,
                FAIL,
                f"built with CUDA {m.cuda}; torch uses CUDA {torch.cuda} (the majors must match)",
                f"install a torch {m.torch_minor} for CUDA {m.cuda}, or build it with this torch: {rebuild}",
            )
        )
    checks += _driver_check(area, m.cuda, gpus)
    for gpu in gpus.gpus:
        device = f"cuda:{gpu.index} {gpu.name} ({format_capability(gpu.capability)})"
        choice = select_code(gpu.capability, m.sass_archs, m.ptx_archs)
        if choice.kind is CodeKind.SASS:
            checks.append(Check(area, OK, f"{device}: SASS {choice.arch.sm}"))  # type: ignore[union-attr]
        elif choice.kind is CodeKind.PTX:
            checks.append(
                Check(
                    area,
                    WARN,
                    f"{device}: PTX {choice.arch.compute} only, compiled by the driver's "  # type: ignore[union-attr]
                    "JIT at first use (slow start, cached per user)",
                    f"prebuild install {p.name} --from SITE, or {rebuild}",
                )
            )
        else:
            checks.append(
                Check(
                    area,
                    FAIL,
                    f"{device}: no code for this GPU (the wheel holds {archs}): CUDA "
                    "calls fail with 'no kernel image is available'",
                    f"prebuild install {p.name} --from SITE, or {rebuild}",
                )
            )
    if p.load_error is not None:
        modules = ", ".join(p.modules)
        checks.append(
            Check(
                area,
                FAIL if p.load_error else OK,
                f"import {modules}: {p.load_error}"
                if p.load_error
                else f"{modules} import (checked in a child process)",
                rebuild if p.load_error else "",
            )
        )
    return checks


def native_checks(
    p: InstalledProject, m: Manifest, torch: TorchInfo, gpus: GpuQuery, reinstall: str
) -> list[Check]:
    """Pure: a native project's stable-ABI wheel, by its own loader's rules (torch from the
    target on, the CUDA major, the driver, code per GPU)."""
    area = p.name
    archs = _archs(m)
    checks = [
        Check(
            area,
            FAIL if p.problem else OK,
            f"{p.title}: native build for torch >= {m.torch_target}, CUDA {m.cuda_version or 'none'}, "
            f"archs {archs}" + (f"; {p.problem}" if p.problem else ""),
            reinstall if p.problem else "",
        )
    ]
    if torch.version is None:
        return checks + [
            Check(
                area,
                FAIL,
                f"torch is not installed; {p.name} needs torch >= {m.torch_target}",
                f"pip install 'torch>={m.torch_target}'",
            )
        ]
    too_old = compat.torch_version_error(m, torch.version)
    if too_old:
        checks.append(Check(area, FAIL, str(too_old), f"pip install 'torch>={m.torch_target}'"))
    elif m.has_cuda and torch.cuda is None and m.cuda_version:
        checks.append(
            Check(
                area,
                WARN,
                compat.cpu_torch_note(torch.version, m.cuda_version, archs),
                compat.cuda_torch_command(m.cuda_version, m.torch_target),
            )
        )
    cuda_error = compat.cuda_major_error(m, torch.cuda)
    if cuda_error:
        checks.append(Check(area, FAIL, str(cuda_error), f"prebuild install {p.name} --from SITE"))
    checks += _driver_check(area, m.cuda_version, gpus)
    for gpu in gpus.gpus:
        device = f"cuda:{gpu.index} {gpu.name} ({format_capability(gpu.capability)})"
        if not m.has_cuda:
            checks.append(Check(area, FAIL, f"{device}: {compat.no_cuda_kernels_error(m)}"))
            continue
        verdict = compat.device_verdict(m, gpu.index, gpu.name, gpu.capability, strict=False)
        if verdict.error:
            checks.append(
                Check(area, FAIL, str(verdict.error), f"prebuild install {p.name} --from SITE")
            )
        elif verdict.warning:
            checks.append(Check(area, WARN, verdict.warning))
        else:
            choice = select_code(gpu.capability, m.sass_archs, m.ptx_archs)
            checks.append(Check(area, OK, f"{device}: SASS {choice.arch.sm}"))  # type: ignore[union-attr]
    if p.load_error is not None:
        checks.append(
            Check(
                area,
                FAIL if p.load_error else OK,
                f"loading its libraries: {p.load_error}"
                if p.load_error
                else "its libraries load (its own loader, in a child process)",
            )
        )
    return checks


def _project_manifest_dict(m: ProjectManifest | Manifest | None) -> dict | None:
    if isinstance(m, ProjectManifest):
        return m.to_dict() | {"torch_minor": m.torch_minor}
    if isinstance(m, Manifest):
        return {
            "kind": "native",
            "package": m.package,
            "package_version": m.package_version,
            "torch_target": m.torch_target,
            "cuda_version": m.cuda_version,
            "sass_archs": [a.sm for a in m.sass_archs],
            "ptx_archs": [a.compute for a in m.ptx_archs],
        }
    return None


def to_dict(facts: Facts, checks: list[Check], verdicts: list[OpVerdict]) -> dict:
    return {
        "ok": not any(c.status == FAIL for c in checks + verdicts),  # type: ignore[operator]
        "python": facts.python,
        "torch": {
            "version": facts.torch.version,
            "cuda": facts.torch.cuda,
            "cxx11_abi": facts.torch.cxx11_abi,
        },
        "package_dir": str(facts.package_dir),
        "manifest": None
        if facts.manifest is None
        else {
            "package_version": facts.manifest.package_version,
            "cuda_version": facts.manifest.cuda_version,
            "sass_archs": [a.sm for a in facts.manifest.sass_archs],
            "ptx_archs": [a.compute for a in facts.manifest.ptx_archs],
            "torch_target": facts.manifest.torch_target,
            "variant": facts.variant,
        },
        "gpus": facts.gpus.to_dict(),
        "projects": [
            {
                "name": p.name,
                "version": p.version,
                "variant": p.variant,
                "modules": list(p.modules),
                "problem": p.problem,
                "manifest": _project_manifest_dict(p.manifest),
                "checks": [
                    {"status": c.status, "message": c.message, "fix": c.fix}
                    for c in project_checks(p, facts.torch, facts.gpus)
                ],
            }
            for p in facts.projects
        ],
        "checks": [
            {"area": c.area, "status": c.status, "message": c.message, "fix": c.fix} for c in checks
        ],
        "ops": [
            {"op": v.op, "device": v.device, "code": v.code, "status": v.status, "reason": v.reason}
            for v in verdicts
        ],
        "jit_locks": [
            {
                "path": str(lock.path),
                "age_seconds": round(lock.age_seconds),
                "stale": lock.stale,
                "state": lock.state,
                "holders": [{"pid": pid, "command": cmd} for pid, cmd in lock.holders],
            }
            for lock in facts.locks
        ],
        "clear_command": clear_command(facts.locks),
    }
