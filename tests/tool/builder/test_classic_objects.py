"""prebuild.tool.builder.classic_objects: what a classic build keeps in its copy's build/, from
one wheel to the next and from one run to the next (a build interrupted or failed resumes), and
what it deletes: objects nvcc made for other archs, or with another toolchain."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from prebuild.runtime.manifest import CompilerCall
from prebuild.tool.builder.classic_objects import (
    STATE_FILE,
    ObjectsKey,
    ObjectsRecord,
    calls_by_object,
    keep_host_objects,
    logged_calls,
    nvcc_outputs,
    prepare_build,
    read_record,
    reuse,
)
from prebuild.tool.builder.shim_calls import raised_standards


def test_nvcc_outputs_reads_every_spelling_and_refuses_what_it_cannot_place():
    calls = [
        ["-c", "/b/a.cu", "-o", "/b/a.o"],
        ["-c", "/b/b.cu", "--output-file", "/b/b.o"],
        ["-c", "/b/c.cu", "-o=/b/c.o"],
        ["-dlink", "/b/a.o", "--output-file=/b/dlink.o"],
    ]
    assert nvcc_outputs(calls) == [
        Path("/b/a.o"),
        Path("/b/b.o"),
        Path("/b/c.o"),
        Path("/b/dlink.o"),
    ]
    assert nvcc_outputs([]) == []
    assert nvcc_outputs([["--version"], *calls]) == nvcc_outputs(
        calls
    )  # torch's query writes nothing
    assert nvcc_outputs([*calls, ["-c", "x.cu"]]) is None  # written where the call ran: unknown
    assert nvcc_outputs([["-c", "x.cu", "-o", "obj/x.o"]]) is None  # relative to that directory
    assert nvcc_outputs([["-c", "x.cu", "-o"]]) is None


def make_build_dir(root: Path) -> tuple[Path, Path, Path]:
    """setuptools' build/ after one wheel: a host object, an nvcc object, the linked extension."""
    temp = root / "build" / "temp.linux-x86_64-cpython-311" / "pkg"
    temp.mkdir(parents=True)
    (temp / "binding.o").write_bytes(b"host")
    (temp / "kernels.o").write_bytes(b"device")
    (temp.parent / "build.ninja").write_text("")
    lib = root / "build" / "lib.linux-x86_64-cpython-311" / "pkg"
    lib.mkdir(parents=True)
    (lib / "_C.so").write_bytes(b"linked")
    (root / "build" / "bdist.linux-x86_64").mkdir()
    return temp / "binding.o", temp / "kernels.o", lib / "_C.so"


def test_keep_host_objects_deletes_what_nvcc_wrote_and_the_linked_extension(tmp_path):
    host, device, linked = make_build_dir(tmp_path)
    assert keep_host_objects(tmp_path / "build", [device]) == 1
    assert host.exists() and not device.exists() and not linked.exists()
    assert [p.name for p in (tmp_path / "build").iterdir()] == ["temp.linux-x86_64-cpython-311"]
    assert (host.parent.parent / "build.ninja").exists()  # ninja's records stay with the objects


@pytest.mark.parametrize("wrote", [None, "outside", "missing build"])
def test_keep_host_objects_starts_clean_when_it_cannot_be_sure(tmp_path, wrote):
    host, device, _ = make_build_dir(tmp_path)
    if wrote == "missing build":
        shutil.rmtree(tmp_path / "build")
    nvcc_wrote = {
        None: None,
        "outside": [device, tmp_path / "elsewhere.o"],
        "missing build": [device],
    }[wrote]
    assert keep_host_objects(tmp_path / "build", nvcc_wrote) == 0
    assert not (tmp_path / "build").exists()


def test_the_host_calls_behind_each_object_are_the_last_that_wrote_it():
    a1 = CompilerCall(
        ("-c", "a.cpp", "-o", "/t/a.o", "-std=c++17"), ("-c", "a.cpp", "-o", "/t/a.o", "-std=c++20")
    )
    a2 = CompilerCall(("-c", "a.cpp", "-o", "/t/a.o"), ("-c", "a.cpp", "-o", "/t/a.o"))
    link = CompilerCall(
        ("/t/a.o", "-shared", "-o", "/t/a.so"), ("/t/a.o", "-shared", "-o", "/t/a.so")
    )
    query = CompilerCall(("-dumpversion",), ("-dumpversion",))
    assert calls_by_object([a1, link, query]) == {"/t/a.o": a1}
    assert calls_by_object([a1, a2]) == {"/t/a.o": a2}  # compiled again: the new call counts
    # A wheel reusing the last wheel's object counts the call that made it.
    assert raised_standards([*{**calls_by_object([a1]), **calls_by_object([])}.values()]) == (
        ("c++17", 1),
    )


KEY = ObjectsKey(
    project="/home/me/ext",
    torch="2.14.1+cu130",
    nvcc="/usr/local/cuda 13.0",
    python="/venv/bin/python 3.11.7",
    cxx_standard="c++20",
)


def compile_call(source: str, obj: Path) -> CompilerCall:
    args = ("-c", source, "-o", str(obj))
    return CompilerCall(args, args)


def log(path: Path, *calls: CompilerCall) -> None:
    """As the shim does: one JSON line per call, appended as the call starts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for call in calls:
            f.write(json.dumps({"given": list(call.given), "run": list(call.run)}) + "\n")


def test_a_record_reads_back_and_anything_else_reads_as_none(tmp_path):
    record = ObjectsRecord(
        KEY,
        "cu130.sm90",
        (compile_call("k.cu", tmp_path / "k.o"),),
        (compile_call("b.cpp", tmp_path / "b.o"),),
        ("/w/nvcc-calls.jsonl", "/w/cxx-calls.jsonl"),
    )
    assert ObjectsRecord.from_json(record.to_json()) == record
    stale = json.loads(record.to_json()) | {"version": 0}
    for text in ("", "{", "[]", json.dumps(stale), json.dumps({"version": 1, "key": {}})):
        assert ObjectsRecord.from_json(text) is None, text
    assert read_record(tmp_path) is None  # no build/ yet


def test_a_log_line_cut_short_is_skipped(tmp_path):
    done = compile_call("a.cu", tmp_path / "a.o")
    log(tmp_path / "calls.jsonl", done)
    with (tmp_path / "calls.jsonl").open("a") as f:
        f.write('{"given": ["-c", "b.c')  # the process killed as it wrote
    assert logged_calls(tmp_path / "calls.jsonl") == [done]


def test_reuse_keeps_all_for_the_same_wheel_host_objects_for_another_nothing_for_another_key(
    tmp_path,
):
    host, device = compile_call("b.cpp", tmp_path / "b.o"), compile_call("k.cu", tmp_path / "k.o")
    nvcc_log, cxx_log = tmp_path / "nvcc.jsonl", tmp_path / "cxx.jsonl"
    query = CompilerCall(("--version",), ("--version",))
    log(nvcc_log, query, device)
    log(cxx_log, host)
    record = ObjectsRecord(KEY, "cu130.sm90", logs=(str(nvcc_log), str(cxx_log)))

    same = reuse(record, KEY, "cu130.sm90")
    assert same.resumed and same.nvcc_wrote == []
    assert same.nvcc_calls == {str(tmp_path / "k.o"): device}
    assert same.host_calls == {str(tmp_path / "b.o"): host}

    other = reuse(record, KEY, "cu130.sm80")
    assert not other.resumed and other.nvcc_wrote == [tmp_path / "k.o"]
    assert other.nvcc_calls == {} and other.host_calls == {str(tmp_path / "b.o"): host}

    for key in (
        replace(KEY, torch="2.14.0+cu130"),
        replace(KEY, project="/home/me/other"),
        replace(KEY, nvcc_env_flags="NVCC_APPEND_FLAGS=-DFMT_USE_CONSTEXPR=1"),
    ):
        assert reuse(record, key, "cu130.sm90") == reuse(None, KEY, "cu130.sm90")
    assert reuse(None, KEY, "cu130.sm90").nvcc_wrote is None  # nothing kept

    # A build whose nvcc calls were never seen (it ran an nvcc of its own): nothing is known.
    (tmp_path / "nvcc.jsonl").unlink()
    assert reuse(record, KEY, "cu130.sm80").nvcc_wrote is None


def test_an_interrupted_wheel_resumes_and_another_wheel_compiles_its_device_code_again(tmp_path):
    """Two runs in one workspace, as the builder calls prepare_build: the first stops after
    compiling (Ctrl-C); the next of the same wheel keeps everything, another wheel's keeps
    only the host compiler's objects, another torch's nothing."""
    build = tmp_path / "source" / "build"
    temp = build / "temp.linux-x86_64-cpython-311"
    logs = {
        label: (tmp_path / label / "nvcc-calls.jsonl", tmp_path / label / "cxx-calls.jsonl")
        for label in ("cu130.sm90", "cu130.sm80")
    }
    assert prepare_build(build, KEY, "cu130.sm90", logs["cu130.sm90"])[0] == 0
    # The first run compiles both objects, links, then is interrupted.
    host, device = compile_call("b.cpp", temp / "b.o"), compile_call("k.cu", temp / "k.o")
    temp.mkdir(parents=True)
    for call in (host, device):
        Path(call.run[-1]).write_bytes(b"object")
    log(logs["cu130.sm90"][0], device)
    log(logs["cu130.sm90"][1], host)
    (build / "lib.linux-x86_64-cpython-311").mkdir()

    kept, plan = prepare_build(build, KEY, "cu130.sm90", logs["cu130.sm90"])
    assert kept == 2 and plan.resumed
    assert (temp / "k.o").exists() and not (build / "lib.linux-x86_64-cpython-311").exists()
    # The logs are emptied next: the new record carries their calls.
    shutil.rmtree(tmp_path / "cu130.sm90")
    assert read_record(build).calls() == ([device], [host])

    kept, plan = prepare_build(build, KEY, "cu130.sm80", logs["cu130.sm80"])
    assert kept == 1 and not plan.resumed and plan.host_calls == {str(temp / "b.o"): host}
    assert (temp / "b.o").exists() and not (temp / "k.o").exists()
    assert read_record(build).label == "cu130.sm80"

    kept, plan = prepare_build(
        build, replace(KEY, torch="2.15.0+cu130"), "cu130.sm80", logs["cu130.sm80"]
    )
    assert kept == 0 and not (temp / "b.o").exists()
    assert (build / STATE_FILE).is_file()  # the new build's record


@pytest.mark.parametrize("garbage", ["", "not json"])
def test_a_build_dir_without_a_readable_record_is_started_afresh(tmp_path, garbage):
    build = tmp_path / "build"
    host, _, _ = make_build_dir(tmp_path)
    (build / STATE_FILE).write_text(garbage)
    assert prepare_build(build, KEY, "cu130.sm90", (tmp_path / "n", tmp_path / "c"))[0] == 0
    assert not host.exists()


def test_the_wheel_an_earlier_run_left_unfinished_is_built_first(tmp_path):
    from types import SimpleNamespace

    from packaging.version import Version

    from prebuild.runtime.arch import parse_arch_list
    from prebuild.tool.builder.classic import ClassicBuilder
    from prebuild.tool.builder.plan import plan_wheels

    toolkit = SimpleNamespace(root=Path("/usr/local/cuda"))
    nvcc = SimpleNamespace(
        path=Path("/usr/local/bin/nvcc"), toolkit=toolkit, version=Version("13.0")
    )
    toolchain = SimpleNamespace(
        nvcc=nvcc, cxx_standard="c++20", torch=SimpleNamespace(version_string="2.14.1+cu130")
    )
    builder = ClassicBuilder(tmp_path / "source", toolchain, tmp_path, identity="/home/me/ext")
    planned = plan_wheels(parse_arch_list("sm_80,sm_90,sm_100"), fat=False, ptx=False)
    assert builder.order(planned) == planned  # no record
    labels = [builder.wheel_label(w) for w in planned]
    assert labels == ["cu130.sm80", "cu130.sm90", "cu130.sm100"]
    logs = (tmp_path / "n.jsonl", tmp_path / "c.jsonl")
    prepare_build(tmp_path / "source" / "build", builder.objects_key, "cu130.sm90", logs)
    assert builder.order(planned) == [planned[1], planned[0], planned[2]]
    other = ClassicBuilder(tmp_path / "source", toolchain, tmp_path, identity="/home/me/other")
    assert other.order(planned) == planned  # another project's objects: nothing to resume


def test_nvcc_s_own_flag_variables_are_part_of_the_objects_key(monkeypatch, tmp_path):
    """The shim adds NVCC_APPEND_FLAGS to each call after ninja compared its command: objects
    made with other values are not for this build (the record of a build without them reads
    as one)."""
    from types import SimpleNamespace

    from packaging.version import Version

    from prebuild.tool.builder.classic import ClassicBuilder

    toolkit = SimpleNamespace(root=Path("/usr/local/cuda"))
    nvcc = SimpleNamespace(path=Path("/x/nvcc"), toolkit=toolkit, version=Version("13.0"))
    toolchain = SimpleNamespace(
        nvcc=nvcc, cxx_standard="c++20", torch=SimpleNamespace(version_string="2.14.1+cu130")
    )
    builder = ClassicBuilder(tmp_path / "source", toolchain, tmp_path, identity="/home/me/ext")
    monkeypatch.delenv("NVCC_PREPEND_FLAGS", raising=False)
    monkeypatch.delenv("NVCC_APPEND_FLAGS", raising=False)
    plain = builder.objects_key
    assert plain.nvcc_env_flags == ""
    old = json.loads(ObjectsRecord(plain, "cu130.sm90").to_json())
    del old["key"]["nvcc_env_flags"]  # as a prebuild before the field wrote it
    assert ObjectsRecord.from_json(json.dumps(old)).key == plain
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DFMT_USE_CONSTEXPR=1")
    appended = builder.objects_key
    assert appended.nvcc_env_flags == "NVCC_APPEND_FLAGS=-DFMT_USE_CONSTEXPR=1"
    monkeypatch.setenv("NVCC_PREPEND_FLAGS", "-O2")
    assert builder.objects_key not in (plain, appended)


def test_a_failed_build_that_reused_an_earlier_runs_objects_says_how_to_start_afresh(tmp_path):
    from prebuild.tool.builder.classic_messages import kept_objects_error
    from prebuild.tool.builder.compile import BuildError

    error = BuildError("the project's build failed", log=tmp_path / "build.log")
    assert kept_objects_error(error, 0, tmp_path) is error
    said = kept_objects_error(error, 3, tmp_path)
    assert said.log == error.log and str(said).startswith("the project's build failed\n\n")
    assert str(said).endswith(
        f"This build kept 3 objects an earlier run compiled in {tmp_path}: to compile "
        f"everything afresh, delete {tmp_path} first."
    )
    one = kept_objects_error(error, 1, tmp_path)
    assert f"This build kept 1 object an earlier run compiled in {tmp_path}" in str(one)


def test_only_a_build_that_ran_ninja_leaves_objects_a_build_can_go_on_from(tmp_path):
    """setuptools without ninja compiles every source whatever is in build/ (DeepSpeed
    0.19.8's setup.py builds without ninja unless DS_ENABLE_NINJA is set): its objects are
    not said to be reused."""
    from prebuild.tool.builder.classic_objects import ninja_logged

    temp = tmp_path / "build" / "temp.linux-x86_64-cpython-311"
    temp.mkdir(parents=True)
    (temp / "a.o").write_bytes(b"")
    assert not ninja_logged(tmp_path / "build")
    (temp / ".ninja_log").write_text("# ninja log v6\n")
    assert ninja_logged(tmp_path / "build")
    assert not ninja_logged(tmp_path / "nowhere")
