"""builder/jit_ahead.py: a wheel's first-use compiles run in a child process and put into the
wheel. torch's compile is a stand-in here (a sitecustomize replaces ``_jit_compile`` with one
writing a file, as torch would the library): what is tested is which triggers run, what is
recorded of each compile and what the wheel becomes. The e2e test of the jit_ext fixture
compiles for real (tests/e2e/test_classic_build.py)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import time
import zipfile
from pathlib import Path

import torch.utils.cpp_extension as cpp_extension
from packaging.tags import Tag, sys_tags
from wheel.wheelfile import WheelFile

from prebuild.runtime.classic_guard import call_key
from prebuild.tool.builder.api_mends import SourceChange
from prebuild.tool.builder.jit_ahead import (
    FailedRun,
    FirstUse,
    FirstUseLibrary,
    compile_first_use,
    interpreter_tag,
    jit_folder,
    python_sources,
    unpack,
    with_first_use,
)
from prebuild.tool.jit_sites import Trigger, Unreached, given_trigger

PROJECT = """\
import os

from torch.utils.cpp_extension import load

A = load(name="pkg_a", sources=["a.cpp"])

def _lazy():
    return load(name="pkg_b", sources=["b.cpp"])

def _again():  # the same name with other sources: torch builds pkg_a_v1
    return load(name="pkg_a", sources=["other.cpp"])

def _needs_a_gpu():
    raise RuntimeError("CUDA is not available")
    load(name="pkg_c", sources=["c.cpp"])

def _v7():  # asked for by a variable of the project's own (rwkv's RWKV_V7_ON)
    if os.environ.get("PKG_V7") == "1":
        load(name="pkg_v7", sources=["v7.cpp"])

class _Extension:  # optimum-quanto's: compiled where its property is first read
    @property
    def lib(self):
        return load(name="pkg_d", sources=["d.cpp"])

EXT = _Extension()
"""

# torch's _jit_compile, replaced in the child: the library of ops a compile would make
# (is_python_module=False returns its path), versioned as torch versions a name compiled
# again with other arguments.
STAND_IN = """\
import os
import torch.utils.cpp_extension as cpp_extension

_seen = {}

def _jit_compile(name, sources, *args, **kwargs):
    if _seen.setdefault(name, sources) != sources:
        name = f"{name}_v1"
    path = os.path.join(os.environ["STAND_IN_OUT"], f"{name}.so")
    with open(path, "w") as f:
        f.write(f"built of {sources}")
    return path

cpp_extension._jit_compile = _jit_compile
"""


def project_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with WheelFile(wheel, "w") as zf:  # RECORD written on closing
        zf.writestr("pkg/__init__.py", PROJECT)
        zf.writestr(
            "pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"
        )
        zf.writestr(
            "pkg-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    return wheel


def test_the_first_use_compiles_run_in_a_child_and_each_library_is_recorded(tmp_path):
    wheel = project_wheel(tmp_path)
    assert list(python_sources(wheel)) == ["pkg/__init__.py"]
    site, out = tmp_path / "stand-in", tmp_path / "built"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    log = tmp_path / "build.log"
    env = {"PYTHONPATH": str(site), "STAND_IN_OUT": str(out)}
    work = tmp_path / "work"
    work.mkdir()
    made = compile_first_use(wheel, env, work / "unpacked", log)
    assert made.triggers == (
        Trigger("pkg", None, "pkg/__init__.py:5"),
        Trigger("pkg", "_lazy", "pkg/__init__.py:8"),
        Trigger("pkg", "_again", "pkg/__init__.py:11"),
        Trigger("pkg", "_needs_a_gpu", "pkg/__init__.py:15"),
        Trigger("pkg", "_v7", "pkg/__init__.py:19"),
        Trigger("pkg", "EXT.lib", "pkg/__init__.py:24", call=False),
    )

    def key(name: str, source: str) -> str:  # the key of the project's call, as the guard's
        return call_key(cpp_extension.load, (), {"name": name, "sources": [source]}, "/nowhere")

    # the same name compiled again of other sources (torch builds pkg_a_v1) is another build,
    # served to that call alone
    assert made.libraries == (
        FirstUseLibrary(
            "pkg_a", key("pkg_a", "a.cpp"), out / "pkg_a.so", "pkg/__init__.py:5", "import pkg"
        ),
        FirstUseLibrary(
            "pkg_b", key("pkg_b", "b.cpp"), out / "pkg_b.so", "pkg/__init__.py:8", "pkg._lazy()"
        ),
        FirstUseLibrary(
            "pkg_a",
            key("pkg_a", "other.cpp"),
            out / "pkg_a_v1.so",
            "pkg/__init__.py:11",
            "pkg._again()",
        ),
        FirstUseLibrary(
            "pkg_d", key("pkg_d", "d.cpp"), out / "pkg_d.so", "pkg/__init__.py:24", "pkg.EXT.lib"
        ),
    )
    assert made.served("pkg") == {
        "pkg_a": [
            {"path": f"{jit_folder('pkg')}/pkg_a.so", "key": key("pkg_a", "a.cpp")},
            {"path": f"{jit_folder('pkg')}/pkg_a_v1.so", "key": key("pkg_a", "other.cpp")},
        ],
        "pkg_b": [{"path": f"{jit_folder('pkg')}/pkg_b.so", "key": key("pkg_b", "b.cpp")}],
        "pkg_d": [{"path": f"{jit_folder('pkg')}/pkg_d.so", "key": key("pkg_d", "d.cpp")}],
    }
    # a failing trigger is said with its error, and the others still ran
    assert made.failed == (FailedRun("pkg._needs_a_gpu()", "RuntimeError: CUDA is not available"),)
    assert made.failed_compile is None  # the project's code failed, not a compile
    text = log.read_text()
    assert "prebuild: running `pkg._needs_a_gpu()`" in text and "Traceback" in text
    note = made.note()
    assert (
        "by `import pkg`, `pkg._lazy()`, `pkg._again()`, `pkg._needs_a_gpu()`, `pkg._v7()`, `pkg.EXT.lib`"
        in note
    )
    assert "'pkg_a' (pkg/__init__.py:5), 'pkg_b' (pkg/__init__.py:8), 'pkg_a' (pkg" in note
    assert "Not made, or not usable: `pkg._needs_a_gpu()` failed: RuntimeError: CUDA is not" in note
    assert "the compile at pkg/__init__.py:19 did not run (what runs it ran without" in note

    final = with_first_use(wheel, made, "pkg", tmp_path / "dist")
    assert final.name == f"pkg-1.0-{interpreter_tag()}.whl"
    with zipfile.ZipFile(final) as zf:
        names = zf.namelist()
        assert zf.read(f"{jit_folder('pkg')}/pkg_a.so") == b"built of ['a.cpp']"
        info = zf.read("pkg-1.0.dist-info/WHEEL").decode()
    assert f"{jit_folder('pkg')}/pkg_b.so" in names and "pkg/__init__.py" in names
    assert "Root-Is-Purelib: false" in info and f"Tag: {interpreter_tag()}" in info


def test_a_trigger_that_made_a_library_ran_its_compile_wherever_the_call_was_seen():
    """The site recorded is the innermost of the wheel's frames, which need not be the line
    the reading found (a call reached through another package's helper records "?"): the
    trigger that ran it made it, so it is not said to have not run."""
    lazy = Trigger("pkg", "_lazy", "pkg/__init__.py:8")
    quiet = Trigger("pkg", "_v7", "pkg/__init__.py:19")
    made = FirstUse(
        (FirstUseLibrary("pkg_b", "k", Path("pkg_b.so"), "?", "pkg._lazy()"),),
        (lazy, quiet),
    )
    assert made.problems() == [
        "the compile at pkg/__init__.py:19 did not run (what runs it ran without calling it: a "
        "condition of the project's own, such as an environment variable it reads)"
    ]
    # a trigger that raised after its compiles (torch-encoding's import of its package, which
    # then needs a module the build environment lacks) is said to have made them
    importing = Trigger("enc.lib", None, "enc/lib/__init__.py:9")
    made = FirstUse(
        (
            FirstUseLibrary(
                "enclib_cpu", "k", Path("a.so"), "enc/lib/__init__.py:9", "import enc.lib"
            ),
            FirstUseLibrary(
                "enclib_gpu", "k", Path("b.so"), "enc/lib/__init__.py:18", "import enc.lib"
            ),
        ),
        (importing,),
        (FailedRun("import enc.lib", "ModuleNotFoundError: No module named 'PIL'"),),
    )
    assert made.problems() == [
        "`import enc.lib` failed after compiling 'enclib_cpu', 'enclib_gpu' (what it would "
        "compile after that, if anything, was not made): ModuleNotFoundError: No module named "
        "'PIL' (running the project's code needs PIL: install it in this environment and "
        "build again)"
    ]
    # exllama 0.1.0 imports the module it compiled by its name: no requirement to install
    importing = Trigger("exllama.cuda_ext", None, "exllama/cuda_ext.py:43")
    made = FirstUse(
        (FirstUseLibrary("exllama_ext", "k", Path("e.so"), importing.site, str(importing)),),
        (importing,),
        (FailedRun(str(importing), "ModuleNotFoundError: No module named 'exllama_ext'"),),
    )
    (problem,) = made.problems()
    assert "'exllama_ext' is the module its load() had just returned" in problem
    assert "The project's own code fails so with this torch" in problem
    assert "install it in this environment" not in problem


def test_the_wheel_is_unpacked_over_what_an_earlier_run_left(tmp_path):
    """A new file has its time in the wheel; one as it should be is left untouched (what was
    compiled of it stays up to date), a changed one is written with the time of now (what was
    compiled of it is not); what the wheel does not hold (objects) stays; an earlier run's mend
    is made again where the file is still the text it was made from."""
    wheel = project_wheel(tmp_path)
    root = tmp_path / "unpacked"
    (root / "left").mkdir(parents=True)  # an earlier run's objects
    assert unpack(wheel, root) == {}
    with zipfile.ZipFile(wheel) as zf:
        stamp = zf.getinfo("pkg/__init__.py").date_time
        text = zf.read("pkg/__init__.py")
    init = root / "pkg" / "__init__.py"
    made = datetime.datetime.fromtimestamp(init.stat().st_mtime)
    assert made.timetuple()[:6] == stamp and (root / "left").exists()
    os.utime(init, (1000, 1000))
    unpack(wheel, root)
    assert init.stat().st_mtime == 1000  # as it was: untouched
    init.write_text("changed")
    os.utime(init, (1000, 1000))
    unpack(wheel, root)
    assert init.read_bytes() == text and init.stat().st_mtime > time.time() - 60
    mend = {"source": hashlib.sha256(text).hexdigest(), "text": "mended", "changes": []}
    assert unpack(wheel, root, {"pkg/__init__.py": mend}) == {"pkg/__init__.py": mend}
    assert init.read_text() == "mended"
    stale = {**mend, "source": "0" * 64}  # made from a text the wheel no longer has
    assert unpack(wheel, root, {"pkg/__init__.py": stale}) == {}
    assert init.read_bytes() == text


def test_a_run_goes_on_from_what_an_earlier_run_in_its_folder_made_for_the_same_key(tmp_path):
    """The folder (unpacked wheel, torch's extensions directory, the record) is kept for the
    same key, its mends made again and counted; another key empties it."""
    wheel = project_wheel(tmp_path)
    site, out = tmp_path / "stand-in", tmp_path / "built"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    env = {"PYTHONPATH": str(site), "STAND_IN_OUT": str(out)}
    folder, log = tmp_path / "first-use", tmp_path / "build.log"
    key = {"torch": "2.14.1+cu130"}
    first = compile_first_use(wheel, env, folder, log, key=key)
    assert not first.kept and [lib.name for lib in first.libraries][:2] == ["pkg_a", "pkg_b"]
    (folder / "torch-extensions" / "pkg_a" / "a.o").write_text("")  # what torch compiled
    record = json.loads((folder / "prebuild-first-use.json").read_text())
    assert record == {"key": key, "mends": {}}
    # as if a mend had changed its __init__.py: made again, and counted as this build's
    text = (folder / "root" / "pkg" / "__init__.py").read_bytes()
    record["mends"] = {
        "pkg/__init__.py": {
            "source": hashlib.sha256(text).hexdigest(),
            "text": text.decode() + "# mended\n",
            "changes": [[1, "x.type() -> x.scalar_type()"]],
        }
    }
    (folder / "prebuild-first-use.json").write_text(json.dumps(record))
    # a run killed in a compile left torch's lock, which would hold the next one for ever
    (folder / "torch-extensions" / "pkg_a" / "lock").write_text("")
    again = compile_first_use(
        wheel, env, folder, log, mend=lambda root, output: ({}, {}, []), key=key
    )
    assert not (folder / "torch-extensions" / "pkg_a" / "lock").exists()
    assert again.kept and (folder / "torch-extensions" / "pkg_a" / "a.o").is_file()
    assert (folder / "root" / "pkg" / "__init__.py").read_text().endswith("# mended\n")
    assert again.changes == (SourceChange("pkg/__init__.py", 1, "x.type() -> x.scalar_type()"),)
    assert again.libraries == first.libraries
    # without mends (--no-mend) the wheel's own text; another key (another torch): afresh
    compile_first_use(wheel, env, folder, log, key=key)
    assert (folder / "root" / "pkg" / "__init__.py").read_bytes() == text
    other = compile_first_use(wheel, env, folder, log, key={"torch": "2.15.0+cu130"})
    assert not other.kept and not (folder / "torch-extensions" / "pkg_a" / "a.o").exists()


def test_a_module_its_package_does_not_import_here_is_not_run(tmp_path):
    """Another platform's module (optimum-quanto's Metal one, imported where MPS is available)
    is not imported to compile it: said, and the module imported unconditionally is built."""
    wheel = tmp_path / "plat-1.0-py3-none-any.whl"
    module = (
        "from torch.utils.cpp_extension import load\n"
        "LIB = load(name='{name}', sources=['{name}.cpp'])\n"
    )
    with WheelFile(wheel, "w") as zf:
        zf.writestr(
            "plat/__init__.py",
            "from . import here\nif False:  # another platform's condition\n    from . import there\n",
        )
        zf.writestr("plat/here.py", module.format(name="here_ext"))
        zf.writestr("plat/there.py", module.format(name="there_ext"))
        zf.writestr(
            "plat-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: plat\nVersion: 1.0\n"
        )
    site, out = tmp_path / "stand-in", tmp_path / "built"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    env = {"PYTHONPATH": str(site), "STAND_IN_OUT": str(out)}
    made = compile_first_use(wheel, env, tmp_path / "unpacked", tmp_path / "build.log")
    assert [lib.name for lib in made.libraries] == ["here_ext"] and made.failed == ()
    assert made.skipped == (("import plat.there", "plat"),)
    assert (
        "`import plat.there` was not run: plat imports its module only under a condition of its "
        "own, false here (another platform's code)" in made.note()
    )
    assert "did not run" not in made.note()
    assert "made in this build, by `import plat.here`: 'here_ext' (plat/here.py:2)" in made.note()


# ColBERT's shape: a class method taking whether a GPU is used compiles the CPU ops; nothing
# of the package calls it without an argument, its users' code does (through __init__).
CLASS_LOADER = """\
from torch.utils.cpp_extension import load

B = load(name="pkg_b", sources=["b.cpp"])

class Scorer:
    @classmethod
    def try_load(cls, use_gpu):
        if use_gpu:
            return
        cls.ops = load(name="pkg_cpu", sources=["cpu.cpp"])
"""


def stand_in(tmp_path: Path) -> dict[str, str]:
    """The variables of a child whose torch compiles are STAND_IN's, writing into tmp_path."""
    site, out = tmp_path / "stand-in", tmp_path / "built"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    return {"PYTHONPATH": str(site), "STAND_IN_OUT": str(out)}


def test_code_the_user_gives_runs_after_the_triggers_found_and_makes_what_they_cannot(tmp_path):
    wheel = project_wheel(tmp_path)
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("pkg/scorer.py", CLASS_LOADER)
    env, log = stand_in(tmp_path), tmp_path / "build.log"
    alone = compile_first_use(wheel, env, tmp_path / "alone", log)
    assert "pkg_cpu" not in {lib.name for lib in alone.libraries}
    assert (
        "the compile at pkg/scorer.py:10 runs only inside the method `Scorer.try_load`, which "
        "needs arguments (give the call its users' code makes, with their arguments, and the "
        "build makes it: `--first-use 'from pkg.scorer import Scorer; Scorer.try_load(...)'`)"
        in alone.note()
    )
    given = (
        "from pkg.scorer import Scorer\nScorer.try_load(False)",
        "from pkg.scorer import Scorer; Scorer.try_load(True)",  # compiles nothing
        "import pkg.missing",
    )
    made = compile_first_use(wheel, env, tmp_path / "given", log, given=given)
    shown = "from pkg.scorer import Scorer; Scorer.try_load(False)"
    assert made.triggers[-3:] == tuple(given_trigger(code) for code in given)
    assert made.triggers[0] == Trigger("pkg", None, "pkg/__init__.py:5")  # found: first
    assert [(lib.name, lib.site, lib.trigger) for lib in made.libraries][-1] == (
        "pkg_cpu",
        "pkg/scorer.py:10",  # the project's call, where the user's code made it
        shown,
    )
    assert f"prebuild: running `{shown}` (--first-use)" in log.read_text()
    problems = made.problems()
    assert not any("pkg/scorer.py:10" in p for p in problems), problems  # made
    assert (
        "`from pkg.scorer import Scorer; Scorer.try_load(True)` (--first-use) ran and compiled "
        "nothing" in made.note()
    )
    assert made.failed[-1] == FailedRun(
        "import pkg.missing", "ModuleNotFoundError: No module named 'pkg.missing'"
    )
    # where the project's own build made libraries, only the user's code runs
    only = compile_first_use(wheel, env, tmp_path / "only", log, given=given[:1], find=False)
    assert only.triggers == (given_trigger(given[0]),)
    # with what the imports it makes compile (pkg's A, pkg.scorer's B)
    assert [lib.name for lib in only.libraries] == ["pkg_a", "pkg_b", "pkg_cpu"]


def test_a_child_that_dies_leaves_every_trigger_failed_with_the_log_named(tmp_path):
    wheel = project_wheel(tmp_path)
    site = tmp_path / "dying"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos._exit(3)\n")
    log = tmp_path / "build.log"
    made = compile_first_use(wheel, {"PYTHONPATH": str(site)}, tmp_path / "unpacked", log)
    assert made.libraries == () and len(made.failed) == 6
    assert made.failed[0] == FailedRun("import pkg", f"the run stopped (its log: {log})")
    assert made.refusal().startswith("prebuild ran them ahead of time (`import pkg`, ")
    assert "none made a library: `import pkg` failed: the run stopped" in made.refusal()


def test_a_run_missing_one_of_the_project_s_requirements_says_to_install_it():
    missing = FirstUse(
        triggers=(Trigger("pkg", None, "pkg/__init__.py:3"),),
        failed=(FailedRun("import pkg", "ModuleNotFoundError: No module named 'einops.layers'"),),
    )
    assert (
        "`import pkg` failed: ModuleNotFoundError: No module named 'einops.layers' (running the "
        "project's code needs einops: install it in this environment and build again)"
        in missing.refusal()
    )
    # a module a tool has since removed (stylegan3's dnnlib imports pkg_resources): no
    # distribution of that name, the tool's older release instead
    removed = FirstUse(
        triggers=(Trigger("pkg", None, "pkg/__init__.py:3"),),
        failed=(FailedRun("import pkg", "ModuleNotFoundError: No module named 'pkg_resources'"),),
    )
    assert (
        "(the project's code imports pkg_resources, and setuptools removed it in 82.0: install "
        "an older setuptools in this environment, then build again: pip install "
        "'setuptools>=72.2,<82')" in removed.refusal()
    )


def test_what_is_said_where_nothing_was_made_or_tried():
    assert FirstUse().refusal() == ""
    lone = FirstUse(unreached=(Unreached("pkg/b.py:4", "inside `m`, a nested function or method"),))
    assert lone.refusal() == (
        "prebuild found nothing to run them ahead of time: the compile at pkg/b.py:4 runs only "
        "inside `m`, a nested function or method."
    )


def test_the_compiles_of_one_place_are_said_at_once():
    why = "inside the method `Codec.load`, which needs arguments"
    example = "from pkg.codec import Codec; Codec.load(...)"
    made = FirstUse(
        unreached=(
            Unreached("pkg/codec.py:4", why, example),
            Unreached("pkg/codec.py:9", why, example),
            Unreached("pkg/other.py:3", "inside a lambda"),
        )
    )
    assert made.problems() == [
        f"the compiles at pkg/codec.py:4, pkg/codec.py:9 run only {why} (give the call its "
        f"users' code makes, with their arguments, and the build makes them: `--first-use "
        f"'{example}'`)",
        "the compile at pkg/other.py:3 runs only inside a lambda",
    ]


def test_the_tag_is_one_pip_installs_on_this_python():
    assert Tag(*interpreter_tag().split("-")) in set(sys_tags())
    assert interpreter_tag().startswith(f"cp{sys.version_info.major}{sys.version_info.minor}-")


# torch's _jit_compile, replaced: a compile that fails while its source says BROKEN, as a
# compiler would on a removed API, and makes its library once it does not.
FAILING_STAND_IN = """\
import os
import torch.utils.cpp_extension as cpp_extension

def _jit_compile(name, sources, *args, **kwargs):
    for source in sources:
        with open(source) as f:
            if "BROKEN" in f.read():
                print(f"{source}(1): error: BROKEN is undefined")
                raise RuntimeError(f"Error building extension '{name}'")
    return os.path.join(os.path.dirname(sources[0]), f"{name}.so")

cpp_extension._jit_compile = _jit_compile
"""


def test_a_compile_that_fails_is_named_and_mended_sources_run_again(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with WheelFile(wheel, "w") as zf:
        zf.writestr(
            "pkg/__init__.py",
            "import os\nfrom torch.utils.cpp_extension import load\n"
            "A = load(name='pkg_a', sources=[os.path.join(os.path.dirname(__file__), 'a.cu')])\n",
        )
        zf.writestr("pkg/a.cu", "BROKEN\n")
        zf.writestr(
            "pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"
        )
    site = tmp_path / "stand-in"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAILING_STAND_IN)
    env = {"PYTHONPATH": str(site)}
    unmended = compile_first_use(wheel, env, tmp_path / "first", tmp_path / "first.log")
    assert unmended.libraries == ()
    assert unmended.failed_compile == FailedRun(
        "import pkg", "RuntimeError: Error building extension 'pkg_a'", "pkg_a"
    )
    # its output names the wheel's files as in the wheel, not the unpacked copy's place
    assert "pkg/a.cu(1): error: BROKEN is undefined" in unmended.output
    assert str(tmp_path / "first") not in unmended.output

    def mend(root: Path, output: str):  # as classic's mended_in: texts before and after
        assert "BROKEN is undefined" in output
        source = root / "pkg" / "a.cu"
        if "BROKEN" not in source.read_text():
            return {}, {}, []
        source.write_text("FIXED\n")
        change = SourceChange("pkg/a.cu", 1, "BROKEN -> FIXED")
        return {"pkg/a.cu": "BROKEN\n"}, {"pkg/a.cu": "FIXED\n"}, [change]

    (tmp_path / "second").mkdir()
    told: list[str] = []
    mended = compile_first_use(
        wheel, env, tmp_path / "second", tmp_path / "second.log", mend=mend, again=told.append
    )
    assert [lib.name for lib in mended.libraries] == ["pkg_a"] and mended.failed == ()
    # the progress hears why it runs again, as the mends are made (not at the end only)
    assert told == [
        "its code meets APIs that were removed, each with an exact replacement: 1 change in "
        "1 file of prebuild's copy (said with the wheel), built again"
    ]
    assert mended.changes == (SourceChange("pkg/a.cu", 1, "BROKEN -> FIXED"),)
    assert "1 change(s) mended its sources: run again" in (tmp_path / "second.log").read_text()
    # recorded for a run that goes on from it (with a key: none here, so made afresh)
    record = json.loads((tmp_path / "second" / "prebuild-first-use.json").read_text())
    assert record["mends"]["pkg/a.cu"]["text"] == "FIXED\n"
    assert record["mends"]["pkg/a.cu"]["changes"] == [[1, "BROKEN -> FIXED"]]
