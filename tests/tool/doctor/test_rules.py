"""prebuild.tool.doctor.rules: the checks and per-op verdicts from made-up facts, for prebuild's
own install and for other projects' wheels (classic and native)."""

from __future__ import annotations

from pathlib import Path

from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.manifest import BuiltLibrary, Library, Manifest, ProjectManifest
from prebuild.tool.doctor.rules import (
    FAIL,
    OK,
    UNKNOWN,
    WARN,
    Facts,
    diagnose,
    op_verdicts,
    project_checks,
)
from prebuild.tool.gpus import Gpu, GpuQuery, TorchInfo
from prebuild.tool.installed import InstalledProject


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


# --- other projects' wheels built by prebuild ---------------------------------------------

SO = "plain_ext/_C.cpython-311-x86_64-linux-gnu.so"


def project(
    sass="sm_90", ptx="", torch="2.14.1+cu130", cuda="13.0", code="gpu", **kw
) -> InstalledProject:
    archs, ptx_archs = parse_arch_list(sass), parse_arch_list(ptx)
    m = ProjectManifest(
        code=code,
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


def test_a_network_extensions_directory_and_packages_that_compile_at_first_use_warn():
    from prebuild.tool.doctor.first_use import CompilesAtFirstUse

    checks = diagnose(
        facts(
            (9, 0),
            extension_dirs=[(Path("/home/me/.cache/torch_extensions"), "nfs4"), (Path("/x"), "")],
            first_use=[CompilesAtFirstUse("gsplat", "1.5.3", ("gsplat/cuda/_backend.py:79",), 23)],
        )
    )
    (network,) = [c for c in checks if "network file system" in c.message]
    assert (
        network.status == WARN and "/home/me/.cache/torch_extensions is on nfs4" in network.message
    )
    assert "TORCH_EXTENSIONS_DIR=/tmp/torch_extensions-$(hostname)" in network.fix
    jit = by_area(checks)["gsplat 1.5.3"]
    assert jit.status == WARN and "gsplat/cuda/_backend.py:79" in jit.message
    assert jit.fix.startswith("prebuild wheel --arch sm_90 gsplat==1.5.3 && pip install")


def test_a_host_wheel_is_checked_for_its_torch_not_for_code_per_gpu():
    """A classic wheel with no GPU code serves every GPU: CUDA host code needs the CUDA build of
    its torch and a driver, CPU code only its torch minor release."""
    t = TorchInfo("2.14.1+cu130", "13.0", True)
    cuda_host = project("", code="cuda-host")
    checks = project_checks(cuda_host, t, gpus((8, 6), (12, 0)))
    assert all(c.status == OK for c in checks), checks
    assert "CUDA 13.0, CUDA host code (no GPU code)" in checks[0].message
    assert not any(c.message.startswith("cuda:") for c in checks)
    cpu_torch = project_checks(cuda_host, TorchInfo("2.14.1+cpu", None, True), gpus())
    assert any(c.status == FAIL and "CPU build" in c.message for c in cpu_torch)
    cpu_code = project("", code="cpu")
    checks = project_checks(cpu_code, TorchInfo("2.14.1+cpu", None, True), gpus((9, 0)))
    assert all(c.status == OK for c in checks), checks
    assert "CPU code only" in checks[0].message
    assert checks[-1].message == "plain_ext._C import (checked in a child process)"
    other = project_checks(
        cpu_code, TorchInfo("2.15.0+cpu", None, True), gpus((9, 0), driver="12.0")
    )
    assert [c.status for c in other] == [OK, FAIL, OK]  # the driver is no concern of CPU code
    assert "built for torch 2.14" in other[1].message


def test_a_wheel_built_on_a_newer_glibc_fails_before_anything_loads():
    """A wheel built on Ubuntu 24.04 (glibc 2.39) installed where glibc is 2.35: said without
    loading it, with the fix; the C++ runtime is the load check's (it depends on the process)."""
    t = TorchInfo("2.14.1+cu130", "13.0", True)
    needs = {"GLIBC": "2.38", "GLIBCXX": "3.4.32"}
    for made in (project, native):
        checks = project_checks(made(runtime_needs=needs), t, gpus((9, 0)), "2.35")
        (row,) = [c for c in checks if c.status == FAIL]
        assert "need glibc 2.38 (GLIBC_2.38), and this machine's is 2.35" in row.message
        assert "version `GLIBC_2.38' not found" in row.message
        assert "no newer than 2.35 (a manylinux_2_28 container" in row.fix
        assert "prebuild wheel" in row.fix
        # the same glibc or a newer one, or a machine that is not glibc (musl), is fine
        for glibc in ("2.38", "2.39", None):
            checks = project_checks(made(runtime_needs=needs), t, gpus((9, 0)), glibc)
            assert all(c.status == OK for c in checks), checks
    # diagnose passes the machine's glibc on
    rows = diagnose(facts((9, 0), projects=[project(runtime_needs=needs)], glibc="2.31"))
    assert any("this machine's is 2.31" in c.message for c in rows if c.status == FAIL)


def test_a_project_calling_nothing_of_torch_s_fits_every_torch_of_its_cuda_major():
    """A classic wheel whose libraries call nothing of torch's (ctypes, CUDA host code): doctor
    checks no torch release, still the CUDA major and a CPU build; the fixes name no release."""
    from dataclasses import replace

    p = project()
    p = replace(p, manifest=replace(p.manifest, torch_abi="none"))
    for version in ("2.9.1+cu130", "2.15.0+cu132"):
        checks = project_checks(p, TorchInfo(version, "13.0", True), gpus((9, 0)))
        assert [c.status for c in checks] == [OK] * len(checks), checks
        assert (
            "classic build for torch of any release (no torch ABI, built with 2.14.1+cu130)"
            in checks[0].message
        )
    checks = project_checks(p, TorchInfo("2.15.0+cpu", None, False), gpus((9, 0)))
    (cpu,) = [c for c in checks if c.status == FAIL]
    assert "CPU build" in cpu.message and "'torch' --index-url" in cpu.fix
    checks = project_checks(p, TorchInfo("2.15.0+cu128", "12.8", True), gpus((9, 0)))
    (other,) = [c for c in checks if c.status == FAIL]
    assert "torch uses CUDA 12.8" in other.message
    checks = project_checks(p, TorchInfo(None, None, False), gpus((9, 0)))
    assert checks[-1].fix == "pip install 'torch'"


def test_a_stable_abi_project_fits_every_torch_from_its_target():
    """A classic wheel whose libraries use only the stable ABI: doctor checks torch >= its
    target, not its minor release, and still the CUDA major and the GPUs."""
    from dataclasses import replace

    p = project()
    p = replace(p, manifest=replace(p.manifest, torch_abi="stable", torch_target="2.10"))
    for version in ("2.10.0+cu130", "2.15.0+cu132"):
        checks = project_checks(p, TorchInfo(version, "13.0", True), gpus((9, 0)))
        assert [c.status for c in checks] == [OK] * len(checks), checks
        assert "classic build for torch >= 2.10 (the stable ABI, built with 2.14.1+cu130)" in (
            checks[0].message
        )
    checks = project_checks(p, TorchInfo("2.9.1+cu130", "13.0", True), gpus((9, 0)))
    (old,) = [c for c in checks if c.status == FAIL]
    assert "stable ABI of torch 2.10; torch 2.9.1+cu130 predates it" in old.message
    assert "pip install 'torch>=2.10'" in old.fix
    checks = project_checks(p, TorchInfo("2.15.0+cpu", None, False), gpus((9, 0)))
    (cpu,) = [c for c in checks if c.status == FAIL]
    assert "CPU build" in cpu.message and "'torch>=2.10' --index-url" in cpu.fix
    checks = project_checks(p, TorchInfo(None, None, False), gpus((9, 0)))
    assert checks[-1].fix == "pip install 'torch>=2.10'"
