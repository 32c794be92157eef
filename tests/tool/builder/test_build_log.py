"""prebuild.tool.builder.build_log: the setup.py line a traceback left, and one run's part of a
log that several runs append to. What compiler_errors shows of a log is tested beside the
breaks and gaps it shows (test_api_breaks.py, test_source_gaps.py)."""

from __future__ import annotations

# The traceback of SparseConvNet cf251d0's setup.py with torch.cuda answering (the frames above
# it setuptools' and pyproject-hooks', cut): its line 12 multiplies tensors on the GPU.
SETUP_TRACEBACK = """Traceback (most recent call last):
  File "/v/lib/python3.11/site-packages/setuptools/build_meta.py", line 317, in run_setup
    exec(code, locals())
  File "<string>", line 12, in <module>
  File "/v/lib/python3.11/site-packages/torch/cuda/__init__.py", line 591, in _lazy_init
    torch._C._cuda_init()
RuntimeError: Found no NVIDIA driver on your system.
"""


def test_a_failed_build_is_read_from_where_its_own_output_starts(tmp_path):
    """A wheel built again (torch.cuda's answer, or ninja, given up) appends to the same log:
    the second failure is told by its own output, not by the first's errors."""
    from prebuild.tool.builder.build_log import log_since, log_size

    log = tmp_path / "build.log"
    assert log_size(log) == 0 and log_since(log, 0) == ""
    log.write_text("ninja: error: build.ninja:23: multiple rules generate a.o\n")
    start = log_size(log)
    with open(log, "a", encoding="utf-8") as f:
        f.write("a.cpp:3: error: \u00e9 undefined\n")
    assert log_since(log, start) == "a.cpp:3: error: \u00e9 undefined\n"
    assert log_since(log, 0).startswith("ninja: error:")


def test_the_setup_py_line_that_failed_with_the_answer_is_named_with_its_code(tmp_path):
    from prebuild.runtime.manifest import BuiltLibrary
    from prebuild.tool.builder.build_log import setup_py_line
    from prebuild.tool.builder.classic_messages import host_only_message

    setup = (
        "import torch\n" * 11 + "    assert torch.matmul(torch.ones(2, 2).cuda(), x) " + "#" * 80
    )
    number, code = setup_py_line(SETUP_TRACEBACK, setup)
    assert number == 12 and code.startswith("assert torch.matmul(") and len(code) == 100
    assert setup_py_line(SETUP_TRACEBACK, "import torch\n") is None  # not a line of it
    assert setup_py_line("RuntimeError: no traceback", setup) is None
    log = tmp_path / "build.log"
    log.write_text(SETUP_TRACEBACK)
    lib = BuiltLibrary("sparseconvnet/SCN.cpython-311-x86_64-linux-gnu.so", "0", 1)
    text = host_only_message(
        "sparseconvnet-0.2-cp311.whl",
        (lib,),
        log,
        "none",
        "RuntimeError: Found no NVIDIA driver on your system.",
        "prebuild wheel --arch sm_90 ./SparseConvNet",
        switches=False,
        answer_where=(12, "assert torch.matmul(...)"),
    )
    assert text.startswith("The wheel its build made (sparseconvnet-0.2-cp311.whl, not kept)")
    assert "answering for a GPU at its line 12 (`assert torch.matmul(...)`) (RuntimeError" in text
    assert "with it removed or guarded, the project may build here" in text
