"""prebuild.tool.doctor and `prebuild doctor`: verdicts from made-up facts, and JIT lock files in
a fake extensions dir (stale, recent, held by a live process)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.manifest import BuiltLibrary, Library, Manifest, ProjectManifest
from prebuild.tool.doctor import (
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Facts,
    InstalledProject,
    JitLock,
    clear_command,
    diagnose,
    extension_module,
    extension_roots,
    find_jit_locks,
    installed_projects,
    op_verdicts,
    parse_proc_locks,
    project_checks,
)
from prebuild.tool.gpus import Gpu, GpuQuery, TorchInfo

PREBUILD = Path(sys.executable).parent / "prebuild"


def manifest(sass="sm_80", ptx="compute_80", cuda="13.0") -> Manifest:
    return Manifest(
        package_version="0.1.0+cu130.sm80.ptx80",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=cuda,
        sass_archs=parse_arch_list(sass),
        ptx_archs=parse_arch_list(ptx),
        libraries=(
            Library("_C.abi3.so", "cpu", "0" * 64),
            Library("_C_cuda.abi3.so", "cuda", "1" * 64),
        ),
    )


def facts(
    *caps: tuple[int, int], torch_cuda="13.0", driver_cuda="13.0", strict=False, **kw
) -> Facts:
    gpus = tuple(Gpu(i, f"GPU{i}", cap) for i, cap in enumerate(caps))
    base = dict(
        python="3.11",
        torch=TorchInfo("2.14.1", torch_cuda, True),
        package_dir=Path("/site/prebuild"),
        manifest=manifest(),
        install_error="",
        gpus=GpuQuery(gpus, "580.1", driver_cuda if gpus else None),
        ops=("fused_ssim", "other_op"),
        strict=strict,
        load_error="",
    )
    base.update(kw)
    return Facts(**base)


def by_area(checks):
    return {c.area: c for c in checks}


def test_per_op_per_device_verdicts_use_the_loader_rules():
    verdicts = [v for v in op_verdicts(facts((8, 0), (9, 0), (7, 5))) if v.device != "cpu"]
    assert len(verdicts) == 6  # 2 ops x 3 GPUs
    per_device = {v.device: v for v in verdicts if v.op == "fused_ssim"}
    a100, h100, t4 = per_device.values()
    assert (a100.code, a100.status) == ("SASS sm_80", OK)
    assert (h100.code, h100.status) == ("PTX compute_80 (driver JIT)", WARN)
    assert "JIT" in h100.reason and "prebuild wheel --arch sm_90" in h100.reason
    assert (t4.code, t4.status) == ("not covered", FAIL)
    assert "prebuild wheel --arch sm_75" in t4.reason
    strict = {v.device: v for v in op_verdicts(facts((9, 0), strict=True)) if v.device != "cpu"}
    assert [v.status for v in strict.values()] == [FAIL]
    # Every op also gets its CPU row; with no GPU that is all there is.
    assert [(v.op, v.device, v.status) for v in op_verdicts(facts())] == [
        ("fused_ssim", "cpu", OK),
        ("other_op", "cpu", OK),
    ]
    assert {
        v.status for v in op_verdicts(facts(load_error="LibraryLoadError: x")) if v.device == "cpu"
    } == {FAIL}


def test_diagnose_all_good():
    checks = diagnose(facts((8, 6)))
    assert all(c.status == OK for c in checks), checks
    assert "cxx11 ABI" in by_area(checks)["torch"].message
    assert "driver 580.1 supports CUDA 13.0" in by_area(checks)["driver vs wheel"].message


def test_diagnose_cuda_mismatches_fail_with_fixes():
    checks = by_area(diagnose(facts((8, 0), torch_cuda="12.8", driver_cuda="12.8")))
    assert checks["torch vs wheel"].status == FAIL and "12.8" in checks["torch vs wheel"].message
    assert (
        checks["driver vs wheel"].status == FAIL
        and "update the NVIDIA driver" in checks["driver vs wheel"].fix
    )


def test_diagnose_install_problems():
    checks = by_area(
        diagnose(facts(manifest=None, install_error="/site/prebuild/_manifest.json does not exist"))
    )
    assert checks["install"].status == FAIL and "--force-reinstall" in checks["install"].fix
    checks = by_area(diagnose(facts(install_error="_C.abi3.so does not match the manifest")))
    assert checks["install"].status == FAIL
    checks = by_area(
        diagnose(facts(torch=TorchInfo(note="torch is not importable: No module named 'torch'")))
    )
    assert checks["torch"].status == FAIL and "pip install" in checks["torch"].fix
    checks = by_area(diagnose(facts(torch=TorchInfo("2.12.0", None, True))))
    assert checks["torch vs wheel"].status == FAIL and "torch>=2.13" in checks["torch vs wheel"].fix
    checks = by_area(diagnose(facts(load_error="UnsupportedGPUError: ...")))
    assert checks["load"].status == FAIL


def test_cpu_torch_with_a_cuda_wheel_says_cpu_only_and_which_torch_to_install():
    cpu_torch = TorchInfo("2.13.0+cpu", None, True)
    checks = by_area(diagnose(facts(torch=cpu_torch)))
    warn = checks["torch vs wheel"]
    assert warn.status == WARN and "CPU build" in warn.message and "CPU only" in warn.message
    assert (
        warn.fix == "pip install 'torch>=2.13' --index-url https://download.pytorch.org/whl/cu130"
    )
    verdicts = op_verdicts(facts((9, 0), torch=cpu_torch))
    assert {(v.device, v.status) for v in verdicts} == {("cpu", OK), ("cuda:0 GPU0 (9.0)", FAIL)}
    assert all(
        "CPU build" in v.reason and "whl/cu130" in v.reason for v in verdicts if v.device != "cpu"
    )
    # A CUDA torch, or a CPU wheel, gets no such warning.
    assert "torch vs wheel" not in by_area(diagnose(facts((8, 0))))
    cpu_wheel = Manifest(
        package_version="0.1.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        libraries=(Library("_C.abi3.so", "cpu", "0" * 64),),
    )
    assert "torch vs wheel" not in by_area(diagnose(facts(torch=cpu_torch, manifest=cpu_wheel)))


def test_gpus_that_cannot_be_listed_are_unknown_with_the_fix():
    no_nvml = GpuQuery(note="nvidia-ml-py is not installed", source="none", listed=False)
    gpus = by_area(diagnose(facts(gpus=no_nvml)))["gpus"]
    assert gpus.status == UNKNOWN and "pip install nvidia-ml-py" in gpus.fix
    no_driver = GpuQuery(
        note="NVML is unavailable (Driver Not Loaded)", source="nvml", listed=False
    )
    gpus = by_area(diagnose(facts(gpus=no_driver)))["gpus"]
    assert gpus.status == UNKNOWN and "driver" in gpus.fix
    none_there = GpuQuery(note="no NVIDIA GPU")  # NVML answered: there are none
    assert by_area(diagnose(facts(gpus=none_there)))["gpus"].status == OK


def test_parse_proc_locks():
    text = (
        "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 77 00:2f:99 0 EOF\n"
        "2: -> FLOCK  ADVISORY  WRITE 78 00:2f:99 0 EOF\n"
        "garbage line\n"
    )
    assert parse_proc_locks(text) == {1234: {4242}, 99: {77}}


def test_extension_roots(tmp_path):
    assert extension_roots({}, tmp_path) == [tmp_path / ".cache" / "torch_extensions"]
    env = {"TORCH_EXTENSIONS_DIR": "/x/ext", "XDG_CACHE_HOME": "/y"}
    assert extension_roots(env, tmp_path) == [Path("/x/ext"), Path("/y/torch_extensions")]


def test_clear_command_removes_only_stale_locks_and_quotes():
    locks = [
        JitLock(Path("/e/a b/lock"), 7200),
        JitLock(Path("/e/young/lock"), 60),
        JitLock(Path("/e/held/lock"), 7200, ((1, "python train.py"),)),
    ]
    assert clear_command(locks) == "rm -f -- '/e/a b/lock'"
    assert [lock.stale for lock in locks] == [True, False, False]
    assert locks[1].state.startswith("recent") and "pid 1" in locks[2].state
    assert clear_command(locks[1:]) == ""


HOLD = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def extensions(tmp_path):
    """A fake TORCH_EXTENSIONS_DIR: one stale lock, one recent, one held by a live process."""
    root = tmp_path / "torch_extensions"
    stale, recent, held = (
        root / "py311_cu121" / n / "lock" for n in ("old_ext", "new_ext", "busy_ext")
    )
    for path in (stale, recent, held):
        path.parent.mkdir(parents=True)
        path.touch()
    old = time.time() - 3 * 86400
    os.utime(stale, (old, old))
    os.utime(held, (old, old))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(held)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield root, stale, recent, held, holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_find_jit_locks_ages_and_live_holders(extensions):
    root, stale, recent, held, pid = extensions
    locks = {lock.path: lock for lock in find_jit_locks([root, root.parent / "absent"])}
    assert set(locks) == {stale, recent, held}
    assert locks[stale].stale and locks[stale].age_seconds > 2 * 86400
    assert not locks[recent].stale and locks[recent].age_seconds < 600
    assert [p for p, _ in locks[held].holders] == [pid] and not locks[held].stale
    assert "python" in locks[held].holders[0][1]


def test_doctor_command_without_nvcc_finds_the_locks_and_its_command_is_safe(extensions, tmp_path):
    root, stale, recent, held, pid = extensions
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TORCH_EXTENSIONS_DIR": str(root),
        "COLUMNS": "200",
    }
    proc = subprocess.run(
        [str(PREBUILD), "doctor", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a CPU install, no GPU: nothing fails
    data = json.loads(proc.stdout)
    assert data["torch"]["version"].startswith("2.")
    assert data["manifest"]["package_version"]
    assert {c["area"]: c["status"] for c in data["checks"]}["jit locks"] == "warn"
    assert {c["area"]: c["status"] for c in data["checks"]}["load"] == "ok"
    states = {Path(lock["path"]).parent.name: lock for lock in data["jit_locks"]}
    assert states["old_ext"]["stale"] and states["old_ext"]["age_seconds"] > 2 * 86400
    assert states["busy_ext"]["holders"][0]["pid"] == pid
    assert states["new_ext"]["state"].startswith("recent")
    subprocess.run(data["clear_command"], shell=True, check=True)
    assert not stale.exists() and recent.exists() and held.exists()
    text = subprocess.run(
        [str(PREBUILD), "doctor", "--no-load"], capture_output=True, text=True, env=env, timeout=300
    )
    assert text.returncode == 0, text.stderr
    assert "busy_ext" in text.stdout and f"pid {pid}" in text.stdout and "nvcc" not in text.stderr


# --- other projects' wheels built by prebuild ---------------------------------------------

SO = "plain_ext/_C.cpython-311-x86_64-linux-gnu.so"


def project(sass="sm_90", ptx="", torch="2.14.1+cu130", cuda="13.0", **kw) -> InstalledProject:
    archs, ptx_archs = parse_arch_list(sass), parse_arch_list(ptx)
    m = ProjectManifest(
        kind="classic",
        torch=torch,
        torch_cuda=cuda,
        cuda=cuda,
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=archs,
        ptx_archs=ptx_archs,
        libraries=(BuiltLibrary(SO, "0" * 64, 1, archs, ptx_archs),),
    )
    base = dict(
        name="plain-ext",
        version="0.1.0+pt214.cu130.sm90",
        manifest=m,
        modules=("plain_ext._C",),
        load_error="",
    )
    base.update(kw)
    return InstalledProject(**base)


def gpus(*caps, driver="13.0") -> GpuQuery:
    return GpuQuery(
        tuple(Gpu(i, f"GPU{i}", cap) for i, cap in enumerate(caps)),
        "580.1",
        driver if caps else None,
    )


def statuses(checks):
    return [(c.status, c.message.split(":")[0]) for c in checks]


def test_extension_module_names():
    assert extension_module(SO) == "plain_ext._C"
    assert extension_module("fused_ssim_cuda.cpython-311-x86_64-linux-gnu.so") == "fused_ssim_cuda"
    assert extension_module("pkg/_C.abi3.so") == "pkg._C"
    assert extension_module("pkg/lib/libfoo.so.1") is None
    assert extension_module("my-pkg/_C.abi3.so") is None  # not importable as a module path


def test_a_project_that_fits_this_machine():
    t = TorchInfo("2.14.1+cu130", "13.0", True)
    checks = project_checks(project(), t, gpus((9, 0)))
    assert all(c.status == OK for c in checks), checks
    assert (
        "classic build for torch 2.14 (built with 2.14.1+cu130), CUDA 13.0, archs sm_90"
        in checks[0].message
    )
    assert any(c.message == "cuda:0 GPU0 (9.0): SASS sm_90" for c in checks)
    assert checks[-1].message == "plain_ext._C import (checked in a child process)"
    assert {c.area for c in checks} == {"plain-ext"}


def test_a_project_built_for_another_torch_fails_with_both_fixes():
    (row,) = [
        c
        for c in project_checks(project(), TorchInfo("2.15.0+cu130", "13.0", True), gpus((9, 0)))
        if c.status == FAIL
    ]
    assert (
        "built for torch 2.14; torch 2.15.0+cu130 is installed" in row.message
        and "undefined symbol" in row.message
    )
    assert (
        row.fix
        == "pip install 'torch==2.14.*', or build it for this torch: prebuild wheel --arch sm_90 plain-ext"
    )


def test_a_project_next_to_a_cpu_torch_or_another_cuda_major():
    cpu = [
        c
        for c in project_checks(project(), TorchInfo("2.14.1+cpu", None, True), gpus())
        if c.status == FAIL
    ]
    assert len(cpu) == 1 and "CPU build" in cpu[0].message
    assert (
        cpu[0].fix
        == "pip install 'torch==2.14.*' --index-url https://download.pytorch.org/whl/cu130"
    )
    cu12 = [
        c
        for c in project_checks(project(), TorchInfo("2.14.1+cu128", "12.8", True), gpus())
        if c.status == FAIL
    ]
    assert len(cu12) == 1 and "torch uses CUDA 12.8" in cu12[0].message
    old_driver = project_checks(
        project(), TorchInfo("2.14.1+cu130", "13.0", True), gpus((9, 0), driver="12.8")
    )
    assert any(c.status == FAIL and "driver supports CUDA 12.8" in c.message for c in old_driver)
    missing = project_checks(project(), TorchInfo(None, None, None, "no torch"), gpus())
    assert missing[-1].status == FAIL and missing[-1].fix == "pip install 'torch==2.14.*'"


def test_gpus_without_code_fail_and_ptx_only_warns():
    t = TorchInfo("2.14.1+cu130", "13.0", True)
    checks = project_checks(project("sm_90", "compute_90"), t, gpus((8, 6), (9, 0), (12, 0)))
    assert statuses(checks)[1:4] == [(FAIL, "cuda"), (OK, "cuda"), (WARN, "cuda")]
    assert (
        "no kernel image is available" in checks[1].message
        and "holds sm_90, compute_90" in checks[1].message
    )
    assert (
        checks[1].fix
        == "prebuild install plain-ext --from SITE, or prebuild wheel --arch sm_120,sm_86,sm_90 plain-ext"
    )
    assert "PTX compute_90 only" in checks[3].message


def test_a_damaged_or_unloadable_project_fails_and_the_report_counts_it():
    t = TorchInfo("2.14.1+cu130", "13.0", True)
    damaged = project(
        problem=f"{SO}: sha256 0123... is not the manifest's ...: altered or replaced",
        load_error=None,
    )
    first = project_checks(damaged, t, gpus())[0]
    assert (
        first.status == FAIL
        and "altered or replaced" in first.message
        and "--force-reinstall" in first.fix
    )
    unreadable = project_checks(
        InstalledProject("x", "1.0", None, "prebuild.json is malformed: ..."), t, gpus()
    )
    assert statuses(unreadable) == [(FAIL, "x 1.0")]
    broken = project(load_error="ImportError: undefined symbol: _ZN3c10...")
    assert project_checks(broken, t, gpus())[-1].status == FAIL
    checks = diagnose(facts(projects=[broken]))
    assert any(c.area == "plain-ext" and "undefined symbol" in c.message for c in checks)


def test_installed_projects_finds_every_distribution_with_a_prebuild_manifest(
    tmp_path, monkeypatch
):
    """A made-up installed project: a real extension module (the stdlib's _bisect, standing
    in for a CUDA extension) and a plain shared library (not imported), found by its
    .dist-info/prebuild.json, its module imported in a child after torch."""
    import _bisect
    import hashlib

    site = tmp_path / "site"
    (site / "fake_ext").mkdir(parents=True)
    files = {
        f"fake_ext/_bisect{importlib.machinery.EXTENSION_SUFFIXES[0]}": Path(
            _bisect.__file__
        ).read_bytes(),
        "fake_ext/libhelper.so": (
            Path(__file__).parents[2] / "src" / "prebuild" / "_C.abi3.so"
        ).read_bytes(),
    }
    for name, data in files.items():
        (site / name).write_bytes(data)
    libs = tuple(
        BuiltLibrary(name, hashlib.sha256(data).hexdigest(), len(data))
        for name, data in files.items()
    )
    manifest = ProjectManifest(
        kind="classic",
        torch="2.13.0+cpu",
        torch_cuda=None,
        cuda="13.0",
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=(),
        ptx_archs=(),
        libraries=libs,
    )
    info = site / "fake_ext-1.0+pt213.cu130.sm90.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-ext\nVersion: 1.0+pt213.cu130.sm90\n"
    )
    (info / "prebuild.json").write_text(manifest.to_json())
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))  # for the child that imports it
    (found,) = installed_projects(check_load=True)
    assert (found.name, found.problem, found.modules, found.load_error) == (
        "fake-ext",
        "",
        ("fake_ext._bisect",),
        "",
    )
    (site / "fake_ext" / "libhelper.so").write_bytes(b"\x7fELF broken")
    (damaged,) = installed_projects(check_load=True)
    assert (
        damaged.problem.startswith("fake_ext/libhelper.so: damaged: ")
        and damaged.manifest == manifest
    )
    assert damaged.load_error is None  # not imported when damaged
    (site / "fake_ext" / "libhelper.so").unlink()
    (missing,) = installed_projects(check_load=True)
    assert "listed in the manifest but missing" in missing.problem and missing.modules == ()


# --- native projects (a package _manifest.json and the loader their wheel carries) ----------


def native(sass="sm_90", cuda="13.0", target="2.13", **kw) -> InstalledProject:
    m = Manifest(
        package_version="0.3.0+cu130.sm90",
        torch_target=target,
        built_with_torch="2.13.0+cpu",
        cuda_version=cuda,
        sass_archs=parse_arch_list(sass),
        ptx_archs=(),
        package="demo",
        op_namespace="demo",
        libraries=(
            Library("_C.abi3.so", "cpu", "0" * 64),
            Library("_C_cuda.abi3.so", "cuda", "1" * 64),
        ),
    )
    base = dict(
        name="demo",
        version="0.3.0+cu130.sm90",
        manifest=m,
        modules=("demo._prebuild_runtime",),
        load_error="",
    )
    base.update(kw)
    return InstalledProject(**base)


def test_a_native_project_by_its_own_loaders_rules():
    t = TorchInfo("2.14.1+cu130", "13.0", True)
    checks = project_checks(native(), t, gpus((9, 0), (8, 6)))
    assert (
        checks[0].status == OK
        and "native build for torch >= 2.13, CUDA 13.0, archs sm_90" in checks[0].message
    )
    assert [c.status for c in checks] == [OK, OK, FAIL, OK]
    assert "demo 0.3.0+cu130.sm90 cannot run on cuda:1" in checks[2].message
    assert checks[-1].message == "its libraries load (its own loader, in a child process)"
    old = project_checks(native(target="2.15"), t, gpus())
    assert any(c.status == FAIL and "needs torch >= 2.15" in c.message for c in old)
    cpu = project_checks(native(), TorchInfo("2.13.0+cpu", None, True), gpus())
    assert any(c.status == WARN and "CPU build" in c.message for c in cpu)
    cu12 = project_checks(native(), TorchInfo("2.14.1+cu128", "12.8", True), gpus())
    assert any(c.status == FAIL and "torch uses CUDA 12.8" in c.message for c in cu12)
    broken = project_checks(native(load_error="OSError: undefined symbol"), t, gpus())
    assert broken[-1].status == FAIL


def test_installed_native_projects_are_found_checked_and_loaded_by_their_own_loader(
    tmp_path, monkeypatch
):
    """A made-up installed native project: prebuild's own CPU library under another package
    name, with the loader copied in as a build does; found through its files (RECORD)."""
    import hashlib

    from prebuild.tool.builder.setuptools_ext import vendor_runtime

    site = tmp_path / "site"
    package = site / "demo"
    package.mkdir(parents=True)
    data = (Path(__file__).parents[2] / "src" / "prebuild" / "_C.abi3.so").read_bytes()
    (package / "_C.abi3.so").write_bytes(data)
    (package / "__init__.py").write_text("")
    vendor_runtime(package)
    Manifest(
        package_version="0.3.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        package="demo",
        op_namespace="prebuild",
        libraries=(Library("_C.abi3.so", "cpu", hashlib.sha256(data).hexdigest(), len(data)),),
    ).write(package)
    info = site / "demo-0.3.0+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 0.3.0+cpu\n")
    files = [p.relative_to(site) for p in package.rglob("*") if p.is_file()]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files) + f"{info.name}/RECORD,,\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    (found,) = [p for p in installed_projects(check_load=True) if p.name == "demo"]
    assert isinstance(found.manifest, Manifest) and found.problem == "" and found.load_error == ""
    (package / "_C.abi3.so").write_bytes(data[:-1])
    (damaged,) = [p for p in installed_projects(check_load=True) if p.name == "demo"]
    assert "_C.abi3.so" in damaged.problem and damaged.load_error is None


def test_an_editable_native_project_is_found_in_its_source(tmp_path, monkeypatch):
    """`pip install -e .` of a native project (the README's test command): its RECORD lists
    only the .pth that puts src/ on sys.path, so its manifest is found through top_level.txt
    in its source; without PEP 610's editable mark nothing is guessed."""
    import hashlib

    source, site = tmp_path / "project" / "src", tmp_path / "site"
    package = source / "editable_demo"
    package.mkdir(parents=True)
    data = (Path(__file__).parents[2] / "src" / "prebuild" / "_C.abi3.so").read_bytes()
    (package / "_C.abi3.so").write_bytes(data)
    (package / "__init__.py").write_text("")
    Manifest(
        package_version="0.1.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        package="editable_demo",
        op_namespace="editable_demo",
        libraries=(Library("_C.abi3.so", "cpu", hashlib.sha256(data).hexdigest(), len(data)),),
    ).write(package)
    info = site / "editable_demo-0.1.0+cpu.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: editable-demo\nVersion: 0.1.0+cpu\n"
    )
    (info / "top_level.txt").write_text("editable_demo\n")
    (site / "__editable__.editable_demo-0.1.0+cpu.pth").write_text(f"{source}\n")
    (info / "RECORD").write_text(
        f"__editable__.editable_demo-0.1.0+cpu.pth,,\n{info.name}/RECORD,,\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(source))  # what the .pth does at startup
    assert [p.name for p in installed_projects(check_load=False) if p.name == "editable-demo"] == []
    (info / "direct_url.json").write_text(
        json.dumps({"dir_info": {"editable": True}, "url": f"file://{source.parent}"})
    )
    (found,) = [p for p in installed_projects(check_load=False) if p.name == "editable-demo"]
    assert (
        isinstance(found.manifest, Manifest)
        and found.manifest.package == "editable_demo"
        and found.problem == ""
    )
