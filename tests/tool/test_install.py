"""prebuild.tool.install / prebuild.tool.gpus and `prebuild install`: wheel selection with made-up
GPUs, the NVML query with a stand-in pynvml, and --dry-run."""

from __future__ import annotations

import json
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from prebuild.runtime.arch import CodeKind
from prebuild.tool import gpus as gpus_module
from prebuild.tool.cli import app
from prebuild.tool.gpus import Gpu, GpuQuery, TorchInfo, filter_visible, query_gpus
from prebuild.tool.index import build_index
from prebuild.tool.install import (
    Candidate,
    SourceError,
    Target,
    find_candidates,
    installer,
    links_in,
    no_fit_fix,
    pip_install,
    project_page_url,
    select_wheel,
)

TAGS = "cp310-abi3-linux_x86_64"
runner = CliRunner()


def wheels(*labels: str, version: str = "0.1.0") -> list[Candidate]:
    return [
        Candidate(f"prebuild-{version}+{label}-{TAGS}.whl", f"/d/{label}.whl") for label in labels
    ]


def gpu(cap: str, n: int = 0) -> Target:
    major, minor = cap.split(".")
    return Target(f"cuda:{n}", (int(major), int(minor)))


def chosen(decision) -> str | None:
    return (
        decision.chosen.candidate.filename.split("+")[1].split("-")[0] if decision.chosen else None
    )


def test_each_gpu_gets_its_own_arch_wheel():
    cands = wheels("cu130.sm80", "cu130.sm86", "cu130.sm90", "cu130.sm80.sm86.sm90")
    assert chosen(select_wheel(cands, [gpu("8.6")], None, None)) == "cu130.sm86"
    assert (
        chosen(select_wheel(cands, [gpu("8.9")], None, None)) == "cu130.sm86"
    )  # same major, newer minor
    assert chosen(select_wheel(cands, [gpu("9.0")], None, None)) == "cu130.sm90"


def test_two_different_gpus_need_a_wheel_covering_both():
    cands = wheels("cu130.sm80", "cu130.sm90", "cu130.sm80.sm90", "cu130.sm80.ptx80")
    decision = select_wheel(cands, [gpu("8.0", 0), gpu("9.0", 1)], None, None)
    assert chosen(decision) == "cu130.sm80.sm90"  # SASS for both beats PTX for one
    rejected = {
        chosen_c.candidate.filename.split("+")[1].split("-")[0]: chosen_c.rejected
        for chosen_c in decision.considered
    }
    assert rejected["cu130.sm80"] == "no code for cuda:1"
    assert rejected["cu130.sm90"] == "no code for cuda:0"
    assert "cuda:0: SASS sm_80" in decision.reason and "cuda:1: SASS sm_90" in decision.reason


def test_ptx_is_used_when_nothing_has_sass():
    decision = select_wheel(wheels("cu130.sm90", "cu130.sm90.ptx90"), [gpu("12.0")], None, None)
    assert chosen(decision) == "cu130.sm90.ptx90"
    (verdict,) = decision.chosen.verdicts
    assert verdict.kind is CodeKind.PTX and "JIT" in verdict.text


def test_arch_specific_sass_only_on_its_exact_gpu():
    cands = wheels("cu130.sm90a")
    assert chosen(select_wheel(cands, [gpu("9.0")], None, None)) == "cu130.sm90a"
    assert select_wheel(cands, [gpu("10.0")], None, None).chosen is None


def test_cuda_rules_torch_major_and_driver():
    cands = wheels("cu128.sm90", "cu130.sm90")
    assert chosen(select_wheel(cands, [gpu("9.0")], None, None)) == "cu130.sm90"  # newest CUDA
    decision = select_wheel(cands, [gpu("9.0")], "12.8", None)
    assert chosen(decision) == "cu128.sm90"
    assert "torch uses CUDA 12.8" in decision.considered[1].rejected
    decision = select_wheel(cands, [gpu("9.0")], None, "12.9")
    assert chosen(decision) == "cu128.sm90"
    assert "driver supports CUDA 12.9" in decision.considered[1].rejected
    assert chosen(select_wheel(cands, [gpu("9.0")], "13.0", "13.2")) == "cu130.sm90"


def test_newest_release_wins_among_equals_and_cpu_wheels_never_fit():
    cands = (
        wheels("cu130.sm90", version="0.1.0")
        + wheels("cu130.sm90", version="0.2.0")
        + wheels("cpu")
    )
    decision = select_wheel(cands, [gpu("9.0")], None, None)
    assert decision.chosen.candidate.filename.startswith("prebuild-0.2.0+")
    assert "no CUDA kernels" in decision.considered[-1].rejected


def test_no_gpu_picks_nothing_and_says_why():
    decision = select_wheel(wheels("cu130.sm90"), [], None, None)
    assert decision.chosen is None and "no GPU" in decision.reason and "--arch" in decision.reason
    decision = select_wheel(wheels("cu130.sm90"), [gpu("7.5")], None, None)
    assert decision.chosen is None and "no wheel covers cuda:0 (7.5)" == decision.reason


def test_a_host_wheel_fits_every_gpu_and_a_machine_with_none_of_its_torch_only():
    """A classic wheel with no GPU code (+pt214.cu130.host, +pt214.cpu) serves every GPU: it is
    chosen for any, and with no GPU at all, but only beside the torch it was built with."""
    host = [
        Candidate(f"tms-0.0.10+{label}-{TAGS}.whl", f"/d/{label}")
        for label in ("pt214.cu130.host",)
    ]
    decision = select_wheel(host, [gpu("8.0", 0), gpu("12.0", 1)], "13.0", "13.2", "2.14.1")
    assert decision.chosen is not None, decision.reason
    assert [v.text for v in decision.chosen.verdicts] == [
        "host code only (no GPU code to match)"
    ] * 2
    # no GPU: still chosen, and said why
    decision = select_wheel(host, [], "13.0", None, "2.14.1")
    assert decision.chosen is not None and "holds no GPU code" in decision.reason
    # its CUDA major must be torch's, and the driver's at least
    decision = select_wheel(host, [gpu("9.0")], "12.8", None, "2.14.1")
    assert decision.chosen is None and "torch uses CUDA 12.8" in decision.considered[0].rejected
    decision = select_wheel(host, [gpu("9.0")], "13.0", "12.9", "2.14.1")
    assert (
        decision.chosen is None and "driver supports CUDA 12.9" in decision.considered[0].rejected
    )
    # another torch: refused, and the fix names that torch
    decision = select_wheel(host, [gpu("9.0")], "13.0", None, "2.13.0")
    assert decision.chosen is None and "built for torch 2.14" in decision.considered[0].rejected
    assert "pip install 'torch==2.14.*'" in no_fit_fix(decision, "tms", [gpu("9.0")])


def test_a_cpu_code_wheel_needs_no_cuda_and_a_gpu_wheel_still_needs_a_gpu():
    cpu = Candidate(f"tss-0.0.5+pt214.cpu-{TAGS}.whl", "/d/cpu")
    for torch_cuda, driver in ((None, None), ("12.8", "12.9"), ("13.0", None)):
        decision = select_wheel([cpu], [gpu("9.0")], torch_cuda, driver, "2.14.1")
        assert decision.chosen is not None, (torch_cuda, decision.reason)
    assert select_wheel([cpu], [], None, None, "2.14.1").chosen is not None
    gpu_wheel = Candidate(f"tss-0.0.5+pt214.cu130.sm90-{TAGS}.whl", "/d/gpu")
    decision = select_wheel([gpu_wheel], [], None, None, "2.14.1")
    assert decision.chosen is None and "--arch" in decision.reason


labels = st.lists(
    st.tuples(
        st.sampled_from(["cu128", "cu130"]),
        st.sets(st.sampled_from(["sm75", "sm80", "sm86", "sm90", "sm90a", "sm120"]), min_size=1),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)
caps = st.lists(
    st.sampled_from(["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0", "12.1"]),
    min_size=1,
    max_size=4,
)


@given(labels, caps)
def test_chosen_wheel_covers_every_gpu_and_none_is_missed(label_specs, cap_list):
    cands = []
    for tag, sms, ptx in label_specs:
        sms = sorted(sms, key=lambda s: (int(s[2:].rstrip("a")), s))
        label = ".".join([tag, *sms]) + (f".ptx{sms[-1][2:].rstrip('a')}" if ptx else "")
        cands += wheels(label)
    targets = [gpu(c, i) for i, c in enumerate(cap_list)]
    decision = select_wheel(cands, targets, None, None)
    fitting = [c for c in decision.considered if not c.rejected]
    assert (decision.chosen is None) == (not fitting)
    if decision.chosen:
        assert all(v.kind is not CodeKind.NONE for v in decision.chosen.verdicts)
        assert len(decision.chosen.verdicts) == len(targets)


# --- GPUs through NVML --------------------------------------------------------------------


def test_filter_visible_follows_cuda_rules():
    found = [
        Gpu(0, "A", (8, 0), "GPU-aaa"),
        Gpu(1, "B", (9, 0), "GPU-bbb"),
        Gpu(2, "C", (8, 6), "GPU-ccc"),
    ]
    assert filter_visible(found, None) == tuple(found)
    assert [(g.index, g.name) for g in filter_visible(found, "2,0")] == [(0, "C"), (1, "A")]
    assert [g.name for g in filter_visible(found, "GPU-bb")] == ["B"]
    assert filter_visible(found, "") == () and filter_visible(found, "-1") == ()
    assert [g.name for g in filter_visible(found, "1,7,0")] == ["B"]  # stops at the invalid one


def fake_pynvml(devices, cuda=12080, fail_init=False):
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    mod.NVMLError = NVMLError

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: len(devices)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: devices[h][0].encode()
    mod.nvmlDeviceGetCudaComputeCapability = lambda h: devices[h][1]
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h:03d}"
    mod.nvmlSystemGetCudaDriverVersion = lambda: cuda
    mod.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    return mod


def test_query_gpus_reads_nvml(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "pynvml", fake_pynvml([("NVIDIA A100", (8, 0)), ("NVIDIA H100", (9, 0))])
    )
    q = query_gpus({})
    assert [(g.index, g.name, g.capability) for g in q.gpus] == [
        (0, "NVIDIA A100", (8, 0)),
        (1, "NVIDIA H100", (9, 0)),
    ]
    assert q.driver_cuda == "12.8" and q.driver_version == "570.86.15"
    assert [g.name for g in query_gpus({"CUDA_VISIBLE_DEVICES": "1"}).gpus] == ["NVIDIA H100"]
    assert q.listed
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    q = query_gpus({})
    assert q.gpus == () and q.listed and q.note == "no NVIDIA GPU"
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], fail_init=True))
    q = query_gpus({})
    assert q.gpus == () and "Driver Not Loaded" in q.note and not q.listed
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    q = query_gpus({})
    assert q.gpus == () and "nvidia-ml-py" in q.note and not q.listed and q.source == "none"


def test_importing_the_gpu_query_creates_no_cuda_context():
    assert "torch.cuda" not in gpus_module.__dict__
    source = open(gpus_module.__file__).read()
    assert "torch.cuda" not in source and "cuInit" not in source


# --- candidates -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "https://o.github.io/prebuild",
        "https://o.github.io/prebuild/simple/",
        "https://o.github.io/prebuild/simple/prebuild",
    ],
)
def test_project_page_url(source):
    assert project_page_url(source) == "https://o.github.io/prebuild/simple/prebuild/"
    assert (
        project_page_url("file:///s/cu130-sm90/simple") == "file:///s/cu130-sm90/simple/prebuild/"
    )
    if not source.endswith("/simple/prebuild"):  # the site or its simple/ index: any project's page
        assert (
            project_page_url(source, "Fused_SSIM")
            == "https://o.github.io/prebuild/simple/fused-ssim/"
        )
    assert (
        project_page_url("https://h/simple/fused-ssim/", "fused_ssim")
        == "https://h/simple/fused-ssim/"
    )


def test_links_in_a_project_page():
    page = (
        '<a href="../../../wheels/prebuild-0.1.0%2Bcu130.sm90-cp310-abi3-linux_x86_64.whl#sha256=ab">x</a>'
        '<a href="other.tar.gz">y</a>'
    )
    (c,) = links_in(page, "https://h/p/cu130-sm90/simple/prebuild/")
    assert c.filename == "prebuild-0.1.0+cu130.sm90-cp310-abi3-linux_x86_64.whl"
    assert (
        c.location
        == "https://h/p/wheels/prebuild-0.1.0%2Bcu130.sm90-cp310-abi3-linux_x86_64.whl#sha256=ab"
    )


def make_dist(tmp_path, *labels):
    from test_index import fake_wheel

    for label in labels:
        fake_wheel(tmp_path / "dist", f"0.1.0+{label}")
    return tmp_path / "dist"


def test_find_candidates_in_folder_site_and_file_url(tmp_path):
    dist = make_dist(tmp_path, "cu130.sm80", "cu130.sm90")
    build_index(dist, tmp_path / "site")
    names = sorted(c.filename for c in find_candidates(str(dist)))
    assert len(names) == 2
    assert sorted(c.filename for c in find_candidates(str(tmp_path / "site"))) == names
    from_url = find_candidates(f"file://{tmp_path}/site/simple")
    assert sorted(c.filename for c in from_url) == names
    assert sorted(c.filename for c in find_candidates(f"file://{tmp_path}/site")) == names
    assert all("#sha256=" in c.location for c in from_url)
    only_90 = find_candidates(f"file://{tmp_path}/site/cu130-sm90/simple/prebuild/")
    assert [c.filename for c in only_90] == [n for n in names if "sm90" in n]
    for bad in (str(tmp_path / "nope"), f"file://{tmp_path}/nope/simple"):
        with pytest.raises(SourceError):
            find_candidates(bad)


# --- the command ----------------------------------------------------------------------------


@pytest.fixture
def machine(monkeypatch):
    """Stand-in GPUs for the command (it asks prebuild.tool.gpus at call time)."""

    def set_gpus(*caps, driver_cuda="13.0"):
        found = tuple(
            Gpu(i, f"GPU {c}", tuple(int(x) for x in c.split(".")), "") for i, c in enumerate(caps)
        )
        monkeypatch.setattr(
            gpus_module,
            "query_gpus",
            lambda: GpuQuery(
                found, "580.1", driver_cuda if found else None, "" if found else "no NVIDIA GPU"
            ),
        )

    return set_gpus


def test_dry_run_with_gpus_picks_and_installs_nothing(tmp_path, machine, monkeypatch):
    dist = make_dist(tmp_path, "cu130.sm80", "cu130.sm90", "cu130.sm80.sm90")
    machine("8.0", "9.0")
    calls = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: calls.append(a))
    result = runner.invoke(
        app, ["install", "--from", str(dist), "--dry-run"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert "Chosen: prebuild-0.1.0+cu130.sm80.sm90-" in result.output
    assert "cuda:0 (GPU 8.0): SASS sm_80" in result.output and "no code for cuda:1" in result.output
    assert calls == []


def test_install_runs_pip_on_the_chosen_wheel(tmp_path, machine, monkeypatch):
    dist = make_dist(tmp_path, "cu130.sm80", "cu130.sm90")
    machine("9.0")
    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr("subprocess.run", lambda cmd, **k: (calls.append(cmd), Done())[1])
    result = runner.invoke(app, ["install", "--from", str(dist)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    (cmd,) = calls
    assert cmd[1:4] == ["-m", "pip", "install"] and cmd[4].endswith("+cu130.sm90-" + TAGS + ".whl")


def test_no_gpu_says_so_and_picks_nothing_unless_arch(tmp_path, machine):
    dist = make_dist(tmp_path, "cu130.sm80", "cu130.sm90")
    machine()
    result = runner.invoke(app, ["install", "--from", str(dist), "--dry-run", "--json"])
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert data["chosen"] is None and "no GPU" in data["reason"] and data["gpus"]["gpus"] == []
    result = runner.invoke(
        app, ["install", "--from", str(dist), "--dry-run", "--json", "--arch", "9.0"]
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert "+cu130.sm90-" in data["chosen"]["wheel"] and data["dry_run"] is True
    assert data["chosen"]["verdicts"] == [
        {"target": "--arch sm_90", "capability": "9.0", "code": "sass", "arch": "sm_90"}
    ]


def test_cpu_torch_is_warned_about_before_a_cuda_wheel_is_picked(tmp_path, machine, monkeypatch):
    dist = make_dist(tmp_path, "cu130.sm80", "cu130.sm90")
    machine()
    monkeypatch.setattr(gpus_module, "torch_info", lambda: TorchInfo("2.13.0+cpu", None, True))
    result = runner.invoke(
        app,
        ["install", "--from", str(dist), "--dry-run", "--arch", "sm_90"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    warning = text.index("warning: torch 2.13.0+cpu is a CPU build")
    assert warning < text.index("Chosen:")  # said before the pick
    assert (
        "sm_90, CUDA 13.0" in text and "--index-url https://download.pytorch.org/whl/cu130" in text
    )
    data = json.loads(
        runner.invoke(
            app, ["install", "--from", str(dist), "--dry-run", "--json", "--arch", "9.0"]
        ).stdout
    )
    assert len(data["warnings"]) == 1 and "CPU build" in data["warnings"][0]
    # With a CUDA torch there is nothing to warn about.
    monkeypatch.setattr(gpus_module, "torch_info", lambda: TorchInfo("2.14.1+cu130", "13.0", True))
    data = json.loads(
        runner.invoke(
            app, ["install", "--from", str(dist), "--dry-run", "--json", "--arch", "9.0"]
        ).stdout
    )
    assert data["warnings"] == []


def test_no_fitting_wheel_exits_3_and_bad_input_exits_2(tmp_path, machine):
    dist = make_dist(tmp_path, "cu130.sm90")
    machine("7.5")
    result = runner.invoke(
        app, ["install", "--from", str(dist), "--dry-run"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 3 and "no wheel covers" in result.output
    assert runner.invoke(app, ["install", "--from", str(dist), "--arch", "sm_7x"]).exit_code == 2
    result = runner.invoke(app, ["install", "--from", str(tmp_path / "nothing-here")])
    assert result.exit_code == 2 and "not a folder of wheels" in " ".join(result.output.split())


def test_a_wheel_tied_to_one_torch_fits_only_that_torch():
    wheels = [
        Candidate(f"fused_ssim-1.0.0+{label}-cp311-cp311-linux_x86_64.whl", "x")
        for label in ("pt213.cu130.sm90", "pt214.cu130.sm90")
    ]
    target = [Target("cuda:0", (9, 0))]
    chosen = select_wheel(wheels, target, "13.0", "13.0", "2.14.1+cu130").chosen
    assert chosen is not None and "+pt214." in chosen.candidate.filename
    decision = select_wheel(wheels, target, "13.0", "13.0", "2.15.0+cu130")
    assert decision.chosen is None
    assert [c.rejected for c in decision.considered] == [
        "built for torch 2.13 (pt213); torch 2.15.0+cu130 is installed",
        "built for torch 2.14 (pt214); torch 2.15.0+cu130 is installed",
    ]
    assert (
        "torch is not installed"
        in select_wheel(wheels, target, None, None, None).considered[0].rejected
    )


# --- another project's wheels: NAME, and what to run when none fits --------------------------

PT_TAGS = "cp311-cp311-linux_x86_64"


def make_mixed_dist(tmp_path):
    """prebuild's own wheels beside another project's, tied to torch 2.14."""
    from test_index import fake_wheel

    dist = make_dist(tmp_path, "cu130.sm80", "cu130.sm90")
    for label in ("pt214.cu130.sm80", "pt214.cu130.sm90"):
        fake_wheel(dist, f"1.0.0+{label}", name="plain_ext")
    return dist


def test_find_candidates_keeps_the_named_projects_wheels(tmp_path):
    dist = make_mixed_dist(tmp_path)
    build_index(dist, tmp_path / "site")
    for source in (
        str(dist),
        str(tmp_path / "site"),
        f"file://{tmp_path}/site/simple",
        f"file://{tmp_path}/site",
    ):
        assert sorted(c.filename.split("-")[0] for c in find_candidates(source)) == [
            "prebuild",
            "prebuild",
        ], source
        theirs = sorted(c.filename for c in find_candidates(source, "plain-ext"))
        assert [n.split("+")[1].split("-")[0] for n in theirs] == [
            "pt214.cu130.sm80",
            "pt214.cu130.sm90",
        ], source
    only = find_candidates(f"file://{tmp_path}/site/pt214-cu130-sm90/simple", "plain_ext")
    assert [c.filename.split("+")[1].split("-")[0] for c in only] == ["pt214.cu130.sm90"]
    with pytest.raises(
        SourceError, match="no wheels of fused-ssim in .*it holds wheels of plain-ext, prebuild"
    ):
        find_candidates(str(dist), "fused-ssim")
    with pytest.raises(SourceError, match="is fused-ssim on that index"):
        find_candidates(f"file://{tmp_path}/site", "fused-ssim")


def test_no_fit_fix_says_which_torch_or_what_to_build():
    tied = [
        Candidate(f"plain_ext-1.0.0+{label}-{PT_TAGS}.whl", "x")
        for label in ("pt214.cu130.sm90", "pt213.cu130.sm90")
    ]
    h100 = [gpu("9.0")]
    decision = select_wheel(tied, h100, "13.0", "13.0", "2.15.0+cu130")
    assert no_fit_fix(decision, "plain-ext", h100) == (
        "install the torch these wheels were built for (pip install 'torch==2.13.*' or pip install 'torch==2.14.*'), "
        "or build them for this torch: prebuild wheel --arch sm_90 plain-ext"
    )
    a10_and_h100 = [gpu("8.6"), gpu("9.0", 1)]
    decision = select_wheel(tied, a10_and_h100, "13.0", "13.0", "2.14.1+cu130")
    assert no_fit_fix(decision, "plain-ext", a10_and_h100).endswith(
        "prebuild wheel --arch sm_86,sm_90 plain-ext"
    )
    decision = select_wheel(wheels("cu130.sm80"), h100, "13.0", "13.0", "2.13.0")
    assert no_fit_fix(decision, "prebuild", h100).endswith(": prebuild wheel --arch sm_90")
    assert (
        no_fit_fix(
            select_wheel(wheels("cu130.sm90"), h100, "13.0", "13.0", "2.13.0"), "prebuild", h100
        )
        == ""
    )
    assert (
        no_fit_fix(select_wheel(wheels("cu130.sm90"), [], None, None, None), "prebuild", []) == ""
    )


def test_install_name_chooses_by_gpus_and_torch_or_says_what_to_run(tmp_path, machine, monkeypatch):
    dist = make_mixed_dist(tmp_path)
    machine("9.0")
    monkeypatch.setattr(gpus_module, "torch_info", lambda: TorchInfo("2.14.1+cu130", "13.0", True))
    result = runner.invoke(
        app, ["install", "plain-ext", "--from", str(dist), "--dry-run"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert (
        "Chosen: plain_ext-1.0.0+pt214.cu130.sm90-" in result.output
        and "of plain-ext from" in result.output
    )
    monkeypatch.setattr(gpus_module, "torch_info", lambda: TorchInfo("2.13.0+cu130", "13.0", True))
    result = runner.invoke(
        app, ["install", "plain-ext", "--from", str(dist), "--dry-run"], env={"COLUMNS": "250"}
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 3, text
    assert "built for torch 2.14 (pt214); torch 2.13.0+cu130 is installed" in text
    assert (
        "Instead: install the torch these wheels were built for (pip install 'torch==2.14.*')"
        in text
    )
    data = json.loads(
        runner.invoke(app, ["install", "plain-ext", "--from", str(dist), "--json"]).stdout
    )
    assert (
        data["chosen"] is None
        and data["project"] == "plain-ext"
        and "prebuild wheel --arch sm_90 plain-ext" in data["fix"]
    )
    # prebuild's own wheels serve every torch from their target on: still chosen by default.
    result = runner.invoke(
        app, ["install", "--from", str(dist), "--dry-run"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0 and "Chosen: prebuild-0.1.0+cu130.sm90-" in result.output


def test_the_installer_is_pip_else_uv():
    assert installer("/v/bin/python", True, "/u/uv") == ["/v/bin/python", "-m", "pip", "install"]
    assert installer("/v/bin/python", False, "/u/uv") == [
        "/u/uv", "pip", "install", "--python", "/v/bin/python"
    ]  # fmt: skip
    assert installer("/v/bin/python", False, None) is None


def test_a_venv_without_pip_installs_the_chosen_wheel_with_uv(monkeypatch, tmp_path, capsys):
    """uv makes its venvs without pip: `prebuild install` hands the wheel to `uv pip install
    --python` this Python; with neither, it says so and installs nothing."""
    import importlib.util
    import shutil

    log = tmp_path / "uv-args"
    uv = tmp_path / "uv"
    uv.write_text(f'#!/bin/sh\necho "$@" > {log}\n')
    uv.chmod(0o755)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pip" else find_spec(name, *a)
    )
    (wheel,) = wheels("cu130.sm90")
    monkeypatch.setattr(shutil, "which", lambda name, *a: str(uv) if name == "uv" else None)
    assert pip_install(wheel, output_to_stderr=False) == 0
    assert log.read_text().split() == ["pip", "install", "--python", sys.executable, wheel.location]
    monkeypatch.setattr(shutil, "which", lambda name, *a: None)
    log.unlink()
    assert pip_install(wheel, output_to_stderr=True) == 1
    assert "has no pip, and uv is not on PATH" in capsys.readouterr().err and not log.exists()
