"""load_trial: a built wheel's libraries loaded beside torch in a child process before the wheel
is written; a name nobody defines refuses it. Real libraries compiled here by gcc, in a wheel-like
zip, loaded by this Python (torch 2.13.0, CPU)."""

from __future__ import annotations

import subprocess
import zipfile

from prebuild.tool.builder.classic_messages import undefined_message
from prebuild.tool.builder.load_trial import load_failures, parse_load_lines, undefined_names


def _library(tmp_path, name: str, source: str) -> bytes:
    (tmp_path / f"{name}.c").write_text(source)
    out = tmp_path / f"{name}.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(out), str(tmp_path / f"{name}.c")], check=True
    )
    return out.read_bytes()


def test_a_library_needing_a_name_nobody_defines_fails_and_the_others_are_tried(tmp_path):
    wheel = tmp_path / "demo-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            "demo/_missing.so",
            _library(
                tmp_path, "missing", "int nowhere(int);\nint f(void) { return nowhere(1); }\n"
            ),
        )
        # a static initialiser that kills the child: the libraries after it are still tried
        zf.writestr(
            "demo/_crash.so",
            _library(
                tmp_path,
                "crash",
                "#include <stdlib.h>\n__attribute__((constructor)) static void c(void) { abort(); }\n",
            ),
        )
        zf.writestr("demo/_zfine.so", _library(tmp_path, "fine", "int g(void) { return 2; }\n"))
        zf.writestr(
            "demo/_zneeds.so",
            _library(
                tmp_path, "needs", "int nowhere2(int);\nint h(void) { return nowhere2(1); }\n"
            ),
        )
        zf.writestr("demo/__init__.py", "")
    failures = load_failures(wheel)
    assert set(failures) == {"demo/_missing.so", "demo/_zneeds.so"}, failures
    assert "undefined symbol: nowhere" in failures["demo/_missing.so"]
    # a name another of the wheel's libraries defines (loaded by the project first) is not judged
    assert undefined_names(failures, {"nowhere2"}) == {"demo/_missing.so": "nowhere"}


def test_the_child_output_is_read_and_nothing_is_judged_without_torch():
    out = "ready\nloaded\t/t/a.so\nfailed\t/t/b.so\t/t/b.so: undefined symbol: _Z3foov\n"
    assert parse_load_lines(out) == (
        True,
        {"/t/b.so": "/t/b.so: undefined symbol: _Z3foov"},
        {"/t/a.so", "/t/b.so"},
    )
    assert parse_load_lines("")[0] is False
    # a library that cannot find one it needs (the driver's, with no GPU) is not judged
    cannot = {"x.so": "libcuda.so.1: cannot open shared object file: No such file or directory"}
    assert undefined_names(cannot, set()) == {}


def test_the_refusal_names_each_library_and_function():
    message = undefined_message(
        "demo-0.1.0-cp311-cp311-linux_x86_64.whl",
        {"demo/_C.so": "_Z3foov"},
        {"_Z3foov": "foo()"},
    )
    assert message.startswith("demo-0.1.0-cp311-cp311-linux_x86_64.whl would not load: ")
    assert "a library of it failed" in message
    assert "(demo/_C.so: `foo()`)" in message
    assert "fails with `undefined symbol: _Z3foov` on every machine" in message
    assert message.endswith("No wheel was written.")
