"""prebuild.tool.builder.shim_calls: what the shims changed of the calls a project asked for
(standards raised or kept, archs replaced, -march=native left out), each a note."""

from __future__ import annotations

from prebuild.runtime.arch import parse_arch_list
from prebuild.runtime.manifest import CompilerCall
from prebuild.tool.builder.shim_calls import portable_calls, raised_note, raised_standards

A = parse_arch_list


def test_raised_standards_counts_the_calls_whose_standard_changed():
    calls = [
        CompilerCall(("-c", "a.cu", "-std=c++17"), ("-c", "a.cu", "-std=c++20")),
        CompilerCall(("-c", "b.cu", "-std", "c++17"), ("-c", "b.cu", "-std", "c++20")),
        CompilerCall(("-c", "c.cu", "-std=c++20"), ("-c", "c.cu", "-std=c++20")),
        CompilerCall(("-c", "d.cu", "-std=c++14"), ("-c", "d.cu", "-std=c++20")),
        CompilerCall(("--version",), ("--version",)),
    ]
    assert raised_standards(calls) == (("c++14", 1), ("c++17", 2))
    assert raised_standards(calls[2:3]) == ()
    # a compile of torch's headers that asked for none (xlstm's CMake build): given C++20
    given = ("-isystem", "/v/torch/include", "-c", "slstm.cc")
    none = [CompilerCall(given, (*given, "-std=gnu++20"))]
    assert raised_standards(none) == (("default", 1),)
    assert raised_note((("the host compiler", (("default", 1),), 5),), "c++20", "2.14").startswith(
        "The project asks the host compiler for no standard (its default, C++17) (1 of its 5 calls)"
    )
    note = raised_note(
        (("nvcc", (("c++17", 2),), 5), ("the host compiler", (), 2)), "c++20", "2.14.1+cu130"
    )
    assert note == (
        "The project asks nvcc for -std=c++17 (2 of its 5 calls); torch 2.14.1+cu130's headers need "
        "C++20: raised to it (recorded in prebuild.json)."
    )
    both = raised_note(
        (("nvcc", (("c++17", 2),), 5), ("the host compiler", (("gnu++14", 1), ("c++17", 1)), 3)),
        "c++20",
        "2.14.1+cu130",
    )
    assert both.startswith(
        "The project asks nvcc for -std=c++17 (2 of its 5 calls) and the host compiler for "
        "-std=gnu++14 (1 of its 3 calls), -std=c++17 (1 of its 3 calls); torch 2.14.1+cu130's"
    )


def test_calls_asking_for_a_native_cpu_target_are_counted_and_said():
    from prebuild.runtime.manifest import CompilerCall
    from prebuild.tool.builder.shim_calls import native_cpu_calls, native_cpu_note

    calls = [
        CompilerCall(("-c", "a.cpp", "-march=native"), ("-c", "a.cpp")),
        CompilerCall(("-c", "b.cu", "-Xcompiler=-march=native"), ("-c", "b.cu")),
        CompilerCall(("-c", "c.cpp", "-march=x86-64-v3"), ("-c", "c.cpp", "-march=x86-64-v3")),
        CompilerCall(("--version",), ("--version",)),
    ]
    assert native_cpu_calls(calls) == 2
    assert native_cpu_calls(calls[2:]) == 0
    assert native_cpu_note(1).startswith("The project asks for -march=native (1 compiler call):")
    assert "(2 compiler calls)" in native_cpu_note(2)


def test_the_archs_a_project_asks_nvcc_for_itself_are_named_where_the_wheel_replaced_them():
    """BEVFusion hard-codes -gencode for sm_70 to sm_86; torch adds the wheel's own."""
    from prebuild.runtime.arch import parse_arch_list
    from prebuild.runtime.manifest import CompilerCall
    from prebuild.tool.builder.shim_calls import replaced_archs

    own = "-gencode=arch=compute_90,code=sm_90"
    calls = [
        CompilerCall(("-c", "a.cu", "-gencode", "arch=compute_70,code=sm_70", own), ()),
        CompilerCall(("-c", "b.cu", "-gencode=arch=compute_86,code=[sm_86,compute_86]"), ()),
        CompilerCall(("-c", "c.cu", own, "-arch=sm_90a"), ()),
        CompilerCall(("--version", "-arch=sm_75"), ()),  # NVCC_APPEND_FLAGS reach queries too
    ]
    assert replaced_archs(calls, parse_arch_list("sm_90")) == (["sm_70", "sm_86"], 2)
    assert replaced_archs(calls[2:], parse_arch_list("sm_90")) == ([], 0)
    assert replaced_archs(calls[2:], parse_arch_list("sm_80")) == (["sm_90", "sm_90a"], 1)
    # PTX alone asked for: named so (flash-fft-conv's arch=compute_80,code=compute_80)
    ptx = [CompilerCall(("-c", "d.cu", "--generate-code=arch=compute_80,code=compute_80"), ())]
    assert replaced_archs(ptx, parse_arch_list("sm_90")) == (["compute_80"], 1)


def test_each_change_the_shims_made_is_one_note_in_order():
    from prebuild.runtime.arch import parse_arch_list
    from prebuild.runtime.manifest import CompilerCall
    from prebuild.tool.builder.shim_calls import shim_notes

    nvcc = [
        CompilerCall(("-c", "a.cu", "-std=c++17", "-arch=sm_75"), ()),
        CompilerCall(("--version",), ()),
    ]
    host = [CompilerCall(("-c", "b.cpp", "-march=native"), ())]
    raised = ((("c++17", 1),), ())
    notes = shim_notes(nvcc, host, parse_arch_list("sm_90"), raised, "c++20", "2.14.1+cu130")
    starts = (
        "The project asks nvcc for -std",
        "The project asks nvcc for sm_75",
        "The project asks for -march",
    )
    assert len(notes) == 3 and all(n.startswith(w) for n, w in zip(notes, starts))
    assert "(1 of its 1 calls)" in notes[0] and "sm_75 itself (1 of its 1 calls)" in notes[1]
    assert shim_notes(nvcc[1:], [], parse_arch_list("sm_90"), ((), ()), "c++20", "2.14") == ()


def test_calls_given_torch_s_abi_are_a_note():
    from prebuild.runtime.arch import parse_arch_list
    from prebuild.runtime.manifest import CompilerCall
    from prebuild.tool.builder.shim_calls import abi_changed_calls, shim_notes

    old, new = "-D_GLIBCXX_USE_CXX11_ABI=0", "-D_GLIBCXX_USE_CXX11_ABI=1"
    host = [
        CompilerCall(("-c", "a.cpp", new, old), ("-c", "a.cpp", new, new)),
        CompilerCall(("-c", "own.cpp", old), ("-c", "own.cpp", old)),  # no torch header
        CompilerCall(("-c", "b.cpp"), ("-c", "b.cpp")),
    ]
    assert abi_changed_calls(host) == 1
    (note,) = shim_notes([], host, parse_arch_list("sm_90"), ((), ()), "c++20", "2.14.1+cu130")
    assert note.startswith(
        "The project asks for libstdc++'s pre-C++11 ABI (-D_GLIBCXX_USE_CXX11_ABI=0, 1 of its 3 "
        "compiler calls); torch 2.14.1+cu130 is built with the C++11 ABI: compiled with it"
    ), note


def test_calls_compiled_as_asked_after_the_raised_standard_failed_are_a_note():
    """The shim compiled them with the project's older standard (run = given there): counted
    per standard and compiler; calls it raised, calls asking for C++20 and links are not."""
    from prebuild.runtime.arch import parse_arch_list
    from prebuild.runtime.manifest import CompilerCall
    from prebuild.tool.builder.shim_calls import kept_standards, shim_notes

    nvcc = [
        CompilerCall(("-c", "fmt.cu", "-std=c++17"), ("-c", "fmt.cu", "-std=c++17")),
        CompilerCall(("-c", "os.cu", "-std=c++17"), ("-c", "os.cu", "-std=c++17")),
        CompilerCall(("-c", "ops.cu", "-std=c++17"), ("-c", "ops.cu", "-std=c++20")),
        CompilerCall(("-c", "new.cu", "-std=c++20"), ("-c", "new.cu", "-std=c++20")),
        CompilerCall(("-o", "lib.so", "-std=c++17"), ("-o", "lib.so", "-std=c++17")),
    ]
    host = [CompilerCall(("-c", "a.cpp", "-std=gnu++14"), ("-c", "a.cpp", "-std=gnu++14"))]
    assert kept_standards(nvcc, "c++20") == (("c++17", 2),)
    assert kept_standards(host, "c++20") == (("gnu++14", 1),)
    assert kept_standards(nvcc, "c++17") == ()
    (raised, kept) = shim_notes(
        nvcc, host, parse_arch_list("sm_90"), ((("c++17", 1),), ()), "c++20", "2.14.1+cu130"
    )
    assert raised.startswith("The project asks nvcc for -std=c++17 (1 of its 5 calls)")
    assert kept == (
        "Compiled as the project asks, not in C++20: nvcc's -std=c++17 (2 calls) and the host "
        "compiler's -std=gnu++14 (1 call), whose code does not compile in C++20 (it includes "
        "none of torch's headers, which alone need it; prebuild.json has each call as run)."
    )


def test_compiles_run_without_the_debug_information_they_asked_for_are_counted():
    from prebuild.tool.builder.shim_calls import debug_left_out_calls

    host = [
        CompilerCall(("-g", "-c", "a.cpp"), ("-g", "-c", "a.cpp", "-g0", "-std=gnu++20")),
        CompilerCall(("-g", "-c", "b.cpp"), ("-g", "-c", "b.cpp")),  # --no-strip
        CompilerCall(("-c", "c.cpp"), ("-c", "c.cpp")),  # asked for none
        CompilerCall(("-g", "a.o", "-shared"), ("-g", "a.o", "-shared")),  # a link
    ]
    assert debug_left_out_calls(host) == 1
    nvcc = [
        CompilerCall(("-g", "-c", "k.cu"), ("-c", "k.cu", "-gencode=arch=compute_90,code=sm_90")),
        CompilerCall(("-g", "-c", "j.cu"), ("-g", "-c", "j.cu")),  # --no-strip
        CompilerCall(("-Xcompiler", "-g", "-c", "x.cu"), ("-Xcompiler", "-g", "-c", "x.cu")),
    ]
    assert debug_left_out_calls([*host, *nvcc]) == 2


# ninja's first failed step of flownet2's correlation_package (bce69c8) with a planted error,
# cut: its build.ninja's command asks nvcc for sm_50 to sm_70 itself.
NVCC = (
    "/usr/local/bin/nvcc -I/v/torch/include -c -c /p/correlation_cuda_kernel.cu -o "
    "/w/build/temp/correlation_cuda_kernel.o -gencode arch=compute_50,code=sm_50 "
    "-gencode arch=compute_70,code=sm_70 -std=c++11"
)
FLOWNET2_FAILED = f"""[1/2] c++ -c correlation_cuda.cc
FAILED: /w/build/temp/correlation_cuda_kernel.o
{NVCC}
/p/correlation_cuda_kernel.cu(10): error: identifier "undefined_thing" is undefined
ninja: build stopped: subcommand failed.
"""


def test_a_failed_nvcc_command_asking_for_other_archs_is_said_to_have_run_for_the_wheel_s():
    from prebuild.tool.builder.build_log import failed_command
    from prebuild.tool.builder.shim_calls import failed_call_archs_note

    command = failed_command(FLOWNET2_FAILED)
    assert command == NVCC
    note = failed_call_archs_note(command, A("sm_90"), "/w/cu130.sm90/nvcc-calls.jsonl")
    assert note == (
        "The failed command above is the project's as its build wrote it; prebuild's nvcc ran "
        "it for sm_90, not for the sm_50, sm_70 it names (each call as run: "
        "/w/cu130.sm90/nvcc-calls.jsonl)."
    )
    # nothing to say: the wheel's own archs, a host compile, no failed step
    own = command.replace("compute_50,code=sm_50", "compute_90,code=sm_90")
    own = own.replace(" -gencode arch=compute_70,code=sm_70", "")
    assert failed_call_archs_note(own, A("sm_90"), "x") == ""
    assert failed_call_archs_note("c++ -c a.cpp -march=x86-64", A("sm_90"), "x") == ""
    assert failed_command("[1/1] c++ -c a.cpp\nninja: no work to do.\n") == ""
    assert failed_call_archs_note("", A("sm_90"), "x") == ""


def test_the_recorded_calls_name_the_build_machine_s_folders():
    """The calls a wheel records name the build's folders (work, venv, Python, home): the same
    build records the same calls, and no user's folder goes out with the wheel."""
    places = {
        "/home/ann": "~",
        "/home/ann/.pyenv/versions/3.11.7": "<python>",
        "/home/ann/proj/.venv": "<venv>",
        "/tmp/prebuild-wheel-x1y2": "<work>",
    }
    call = CompilerCall(
        ("-I/home/ann/proj/.venv/lib/python3.11/site-packages/torch/include", "-c",
         "/tmp/prebuild-wheel-x1y2/source/csrc/k.cu"),
        ("-I/home/ann/.pyenv/versions/3.11.7/include/python3.11", "--output-file",
         "/home/ann/data/o.o", "/tmp/prebuild-wheel-x1y2b/k.cu", "/usr/local/cuda/bin/nvcc"),
    )  # fmt: skip
    (shown,) = portable_calls([call], places)
    assert shown.given == (
        "-I<venv>/lib/python3.11/site-packages/torch/include",
        "-c",
        "<work>/source/csrc/k.cu",
    )
    # a folder's name that only begins like another's is not it; other folders stay
    assert shown.run == (
        "-I<python>/include/python3.11",
        "--output-file",
        "~/data/o.o",
        "/tmp/prebuild-wheel-x1y2b/k.cu",
        "/usr/local/cuda/bin/nvcc",
    )
    assert portable_calls([call], {}) == (call,)
    # setuptools' temp folder with the absolute source path appended (detectron2's -MF)
    glued = (
        "/tmp/prebuild-wheel-x1y2/source/build/temp.linux-cpython-311/tmp/prebuild-wheel-x1y2/k.o.d"
    )
    (shown,) = portable_calls([CompilerCall(("-MF", glued), ())], places)
    assert shown.given == ("-MF", "<work>/source/build/temp.linux-cpython-311/<work>/k.o.d")
