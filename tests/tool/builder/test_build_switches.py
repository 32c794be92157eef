"""build_switches.py: the variables a project's setup.py reads to build its extensions at
install time, and what a user is told when a project built none."""

from __future__ import annotations

from prebuild.tool.builder.build_switches import (
    build_variables,
    cmake_advice,
    cmake_switches,
    forced_build_switches,
    gpu_answer_note,
    gpu_query_line,
    has_switches,
    host_code_asked,
    ninja_failed,
    ninja_note,
    ninja_off_line,
    switch_value,
    switches_advice,
)

# The lines of DeepSpeed 0.19.8's setup.py that decide what it compiles (abridged).
DEEPSPEED_SETUP = """
def is_env_set(key):
    return bool(os.environ.get(key, None))
def get_env_if_set(key, default: typing.Any = ""):
    return os.environ.get(key, None) or default
os.environ["TORCH_CUDA_ARCH_LIST"] = get_default_compute_capabilities()
BUILD_OP_DEFAULT = int(get_env_if_set('DS_BUILD_OPS', BUILD_OP_PLATFORM))
if command_exists('git') and not is_env_set('DS_BUILD_STRING'):
    pass
"""


def test_the_variables_a_setup_py_reads_to_decide_what_it_compiles():
    assert build_variables(DEEPSPEED_SETUP) == ["DS_BUILD_OPS"]
    text = (
        'force = os.environ.get("FORCE_CUDA", "0") == "1"\n'
        'os.environ["BUILD_X"] = "1"\n'  # set, not read
        'if os.getenv("BUILD_NO_CUDA"): pass\n'
        'with_ops = os.environ["WITH_CUDA"]\n'
        'jobs = os.environ["MAX_JOBS"]\n'  # not a switch
        'if os.environ["CUDA_HOME"] == "": pass\n'
        'again = os.getenv("FORCE_CUDA")\n'
    )
    assert build_variables(text) == ["FORCE_CUDA", "BUILD_NO_CUDA", "WITH_CUDA"]
    # curobo 0.8 (a35a708) builds its extensions at install time only with CUROBO_USE_PYBIND=1
    curobo = 'USE_PYBIND = os.environ.get("CUROBO_USE_PYBIND", "0") == "1"\n'
    assert build_variables(curobo + 'ninja = os.getenv("USE_NINJA")\n') == ["CUROBO_USE_PYBIND"]
    command = "prebuild wheel --arch sm_90 ./curobo"
    said = switches_advice("nvidia-curobo", ["CUROBO_USE_PYBIND"], command, {}, curobo)
    assert said.endswith(f"CUROBO_USE_PYBIND=1 {command}"), said


def test_advice_names_a_known_projects_switches_or_what_its_setup_py_reads():
    command = "prebuild wheel --arch sm_90 deepspeed==0.19.8"
    ds = switches_advice("DeepSpeed", ["DS_BUILD_OPS"], command)
    assert "DS_BUILD_FUSED_ADAM=1" in ds and "DS_ACCELERATOR=cuda" in ds
    assert f"DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1 {command}" in ds
    other = switches_advice("someproj", ["FORCE_CUDA"], "prebuild wheel --arch sm_90 ./x")
    assert "reads FORCE_CUDA" in other and "prebuild wheel --arch sm_90 ./x" in other
    assert "first import compiles" in switches_advice("x", [], "prebuild wheel")


COLOSSALAI_SETUP = (  # colossalai 0.5.0's setup.py, the lines that read its switches
    'BUILD_EXT = int(os.environ.get("BUILD_EXT", "0")) == 1\n'
    'if os.environ.get("WITH_CUDA_KERNELS") == "yes": pass\n'
)


def test_advice_gives_the_value_the_setup_py_compares_a_switch_with():
    """colossalai 0.5.0 builds its kernels at install time with BUILD_EXT=1: the advice is a
    command to run, not only a name."""
    command = "prebuild wheel --arch sm_90 colossalai==0.5.0"
    one = switches_advice("colossalai", ["BUILD_EXT"], command, {}, COLOSSALAI_SETUP)
    assert one.endswith(f"at install time: BUILD_EXT=1 {command}"), one
    two = switches_advice(
        "colossalai", ["WITH_CUDA_KERNELS", "BUILD_EXT"], command, {}, COLOSSALAI_SETUP
    )
    assert "reads WITH_CUDA_KERNELS, BUILD_EXT: one of them" in two
    assert f"(for example WITH_CUDA_KERNELS=yes {command})" in two
    assert switch_value(COLOSSALAI_SETUP, "BUILD_EXT") == "1"
    assert switch_value('os.getenv("X_FORCE_BUILD", "FALSE") == "TRUE"', "X_FORCE_BUILD") == "TRUE"
    assert switch_value('if os.environ.get("WITH_CUDA"): pass', "WITH_CUDA") == "1"


def test_advice_does_not_ask_for_a_variable_the_user_set_already():
    """torch_memory_saver 0.0.10 reads TMS_CUDA_MAJOR, which its build needs set: being told
    to set it, when it was, misled."""
    command = "prebuild wheel --arch sm_90 ./x"
    both = switches_advice("x", ["TMS_CUDA_MAJOR", "WITH_CUDA"], command, {"TMS_CUDA_MAJOR": "13"})
    assert (
        f"reads WITH_CUDA, which may make it build the extension at install time: WITH_CUDA=1 {command}"
        in both
    )
    assert "(set here already: TMS_CUDA_MAJOR=13)" in both
    every = switches_advice("x", ["TMS_CUDA_MAJOR"], command, {"TMS_CUDA_MAJOR": "13"})
    assert every == (
        "the variables its setup.py reads are set here (TMS_CUDA_MAJOR=13), and none made it "
        "compile GPU code"
    )


def test_a_known_cpu_only_build_is_refused_before_compiling():
    from prebuild.tool.builder.build_switches import no_gpu_refusal

    command = "prebuild wheel --arch sm_90 deepspeed==0.19.8"
    said = no_gpu_refusal("DeepSpeed", {"DS_BUILD_FUSED_ADAM": "1"}, False, command)
    assert "would build for the CPU only unless DS_ACCELERATOR=cuda" in said
    assert f"For example: DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1 {command}" in said
    # told, or a GPU visible (its setup.py then picks CUDA itself), or a project not known
    assert no_gpu_refusal("deepspeed", {"DS_ACCELERATOR": "cuda"}, False, command) is None
    assert no_gpu_refusal("deepspeed", {}, True, command) is None
    assert no_gpu_refusal("gsplat", {}, False, command) is None
    # pytorch3d and mmcv build CUDA with FORCE_CUDA=1, which every classic build gets (it was
    # refused, and told to set it): whatever the user's environment says
    for name in ("pytorch3d", "mmcv"):
        for environ in ({}, {"FORCE_CUDA": "0"}):
            assert no_gpu_refusal(name, environ, False, command) is None


def test_the_distribution_a_classic_project_is_where_cheaply_known():
    from prebuild.tool.builder.build_switches import distribution_of

    assert distribution_of("deepspeed==0.19.8", "deepspeed-0.19.8") == "deepspeed"
    assert distribution_of("./DeepSpeed-0.19.8.tar.gz", "DeepSpeed-0.19.8") == "DeepSpeed"
    assert distribution_of("pytorch3d[all]>=0.7", "x") == "pytorch3d"
    assert distribution_of("git+https://github.com/x/y@v1", "source") is None
    assert distribution_of("./checkout", "source") is None


# The lines of causal-conv1d 1.7.0's setup.py (flash-attn's and mamba-ssm's read the same way)
# that choose between compiling and downloading the project's own prebuilt wheel (abridged).
CAUSAL_CONV1D_SETUP = """
FORCE_BUILD = os.getenv("CAUSAL_CONV1D_FORCE_BUILD", "FALSE") == "TRUE"
SKIP_CUDA_BUILD = os.getenv("CAUSAL_CONV1D_SKIP_CUDA_BUILD", "FALSE") == "TRUE"
FORCE_CXX11_ABI = os.getenv("CAUSAL_CONV1D_FORCE_CXX11_ABI", "FALSE") == "TRUE"
"""


def test_a_project_that_would_download_its_own_wheel_is_told_to_compile():
    assert forced_build_switches(CAUSAL_CONV1D_SETUP, {}) == {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}
    # A value the user set is theirs; a switch compared with no value is set to 1.
    assert forced_build_switches(CAUSAL_CONV1D_SETUP, {"CAUSAL_CONV1D_FORCE_BUILD": "FALSE"}) == {}
    assert forced_build_switches('if os.environ.get("X_FORCE_BUILD"): pass', {}) == {
        "X_FORCE_BUILD": "1"
    }
    assert forced_build_switches(DEEPSPEED_SETUP, {}) == {}


def test_a_setup_py_choosing_cuda_by_a_visible_gpu_is_named_with_its_line():
    # DCNv2 0.4's setup.py (abridged): no variable overrides its test.
    dcn = (
        "import torch\n"
        "# if torch.cuda.is_available() and torch.version.hip:  (nerfacc 0.5.3: a comment)\n"
        "def get_extensions():\n"
        "    extension = CppExtension\n"
        "    if torch.cuda.is_available() and CUDA_HOME is not None:\n"
        "        extension = CUDAExtension\n"
    )
    assert gpu_query_line(dcn) == (5, "torch.cuda.is_available()")
    assert gpu_query_line(DEEPSPEED_SETUP) is None
    note = gpu_answer_note(5, "9.0")
    assert "its setup.py asks torch.cuda.is_available() (setup.py line 5)" in note
    assert "torch.cuda answers as a GPU of compute capability 9.0 would" in note
    assert "and so does nvidia-smi (--query-gpu=compute_cap" in note
    # nothing of it in the advice, which names the variables a setup.py reads
    assert "is_available" not in switches_advice("x", ["FORCE_CUDA"], "prebuild wheel")


BNB_CMAKELISTS = """
set(COMPUTE_BACKEND "cpu" CACHE STRING "The compute backend to use (cpu, cuda, hip, xpu)")
set_property(CACHE COMPUTE_BACKEND PROPERTY STRINGS cpu cuda hip xpu)
option(PTXAS_VERBOSE "Pass through -v flag to PTX Assembler" OFF)
set(HIP_PLATFORM "amd" CACHE STRING "HIP Platform")
"""


def test_a_cmake_build_is_told_the_settings_that_make_it_compile_its_cuda_code():
    """bitsandbytes 0.50.1 (scikit-build-core) builds its CPU backend unless COMPUTE_BACKEND is
    cuda; other projects have an option that is OFF. Already cuda, ON, or an option that
    leaves something out: nothing to tell."""
    assert cmake_switches(BNB_CMAKELISTS) == ["-DCOMPUTE_BACKEND=cuda"]
    assert cmake_switches(
        'option(WITH_CUDA "Build the CUDA ops" OFF)\noption(USE_GPU "gpu" ON)\n'
        'option(DISABLE_CUDA_GRAPHS "no graphs" OFF)\noption(BUILD_DOCS "docs" OFF)\n'
    ) == ["-DWITH_CUDA=ON"]
    assert cmake_switches(BNB_CMAKELISTS.replace('"cpu" CACHE', '"cuda" CACHE')) == []
    command = "prebuild wheel --arch sm_90 git+https://github.com/x/bnb@0.50.1"
    assert cmake_advice(["-DCOMPUTE_BACKEND=cuda"], command) == (
        "its CMakeLists.txt builds its CUDA code only with -DCOMPUTE_BACKEND=cuda, which a "
        "CMake-driven build (scikit-build-core, most setup.py wrappers) reads from CMAKE_ARGS: "
        f"CMAKE_ARGS='-DCOMPUTE_BACKEND=cuda' {command}"
    )
    assert cmake_advice([], command) == ""


def test_a_variable_that_skips_the_build_is_never_the_advice_to_build():
    """bitsandbytes' setup.py reads BNB_SKIP_CMAKE: setting it would build less, not more."""
    said = switches_advice("bitsandbytes", ["BNB_SKIP_CMAKE", "WITH_CUDA"], "prebuild wheel")
    assert said.startswith("its setup.py reads WITH_CUDA, which may make it build"), said
    assert "BNB_SKIP_CMAKE" not in said
    skipped = {"BNB_SKIP_CMAKE": "1"}  # set here: said, as the reason nothing was built
    said = switches_advice("bitsandbytes", ["BNB_SKIP_CMAKE"], "prebuild wheel", skipped)
    assert "BNB_SKIP_CMAKE=1" in said


def test_switches_are_named_only_where_there_are_some_to_set():
    assert has_switches("deepspeed", [], {})  # a known project's
    assert has_switches("natten", ["NATTEN_CUDA_ARCH", "NATTEN_BUILD_WITH_PTX"], {})
    assert not has_switches("natten", ["NATTEN_CUDA_ARCH"], {"NATTEN_CUDA_ARCH": "9.0"})
    assert not has_switches("tool", ["TOOL_SKIP_CUDA"], {})  # it would build less
    assert not has_switches("tool", [], {})


def test_a_setup_py_that_turns_ninja_off_is_found_unless_it_compiles_its_own_way():
    """PyG's (torch-scatter 2.1.2, torch-spline-conv 1.2.2) and a dict of options; not in a
    comment, not use_ninja=True, not where setup.py replaces the compiler's _compile."""
    pyg = (
        "cmdclass={\n"
        "    'build_ext':\n"
        "    BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)\n"
        "}\n"
    )
    assert ninja_off_line(pyg) == 3
    assert ninja_off_line("opts = {'use_ninja': False}\nBuildExtension.with_options(**opts)") == 1
    assert (
        ninja_off_line("# use_ninja=False is slower\nBuildExtension.with_options(use_ninja=True)")
        is None
    )
    assert ninja_off_line("x = 1\n") is None
    own = "def _compile(obj, src, ext, cc_args, postargs, pp_opts):\n    pass\n" + pyg
    assert ninja_off_line(own) is None
    note = ninja_note(3, 2, pyg)
    assert "turns torch's ninja backend off (setup.py line 3)" in note
    assert "built with ninja (2 at a time" in note
    # DeepSpeed 0.19.8's: on only where DS_ENABLE_NINJA is set
    deepspeed = (
        "if command_exists('ninja'):\n"
        "    use_ninja = is_env_set('DS_ENABLE_NINJA')\n"
        "    cmdclass['build_ext'] = get_accelerator().build_extension().with_options("
        "use_ninja=use_ninja)\n"
    )
    assert ninja_off_line(deepspeed) == 3
    assert "a setting of its own (setup.py line 3); off, the build compiles one source" in (
        ninja_note(3, 2, deepspeed)
    )
    assert ninja_off_line("BuildExtension.with_options(use_ninja = True)") is None


def test_ninjas_own_error_is_told_from_a_compilers():
    compiler = (
        "FAILED: /w/build/temp/csrc/a.o\n/w/csrc/a.cu(3): error: identifier x is undefined\n"
        "ninja: build stopped: subcommand failed.\n"
        "RuntimeError: Error compiling objects for extension\n"
    )
    assert ninja_failed(compiler) is None
    dup = "ninja: error: build.ninja:12: multiple rules generate /w/build/temp/csrc/a.o\n"
    assert ninja_failed(compiler + dup) == dup.strip()


def test_a_setup_py_asking_nvidia_smi_for_its_arch_is_named_with_its_line():
    smi = (
        "import subprocess\n"
        "# nvidia-smi must be on PATH (a comment)\n"
        "def arch():\n"
        "    out = subprocess.check_output(\n"
        '        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])\n'
    )
    assert gpu_query_line(smi) == (5, "nvidia-smi")
    assert gpu_query_line("os.system('nvidia-smi -L')\n") == (1, "nvidia-smi")
    assert gpu_query_line("NVIDIA_SMI_PATH = find('nvidia-smi-wrapper')\n") is None
    note = gpu_answer_note(5, "8.0", "nvidia-smi")
    assert note.startswith(
        "no GPU is visible here, and its setup.py asks nvidia-smi (setup.py line 5)"
    )


def test_host_code_is_what_a_known_project_told_to_build_for_cuda_was_asked():
    """DeepSpeed's async_io (DS_BUILD_AIO=1) is a CPU op: with DS_ACCELERATOR=cuda (or a GPU
    visible) a wheel of it holding no GPU code is what was asked, not a CPU build for want of a
    GPU; a project prebuild knows no such switch of is refused as before."""
    assert host_code_asked("deepspeed", {"DS_ACCELERATOR": "cuda"}, gpu_visible=False)
    assert host_code_asked("DeepSpeed", {}, gpu_visible=True)
    assert not host_code_asked("deepspeed", {}, gpu_visible=False)
    assert not host_code_asked("deepspeed", {"DS_ACCELERATOR": "cpu"}, gpu_visible=False)
    assert not host_code_asked("dcnv2", {"FORCE_CUDA": "1"}, gpu_visible=True)


def test_options_a_setup_py_looks_for_on_its_command_line_are_found_with_their_line():
    """Uni-Core's loop (``arg == "--enable-cuda-ext"``), apex's old ``"--cpp_ext" in sys.argv``
    with ``sys.argv.remove``, MinkowskiEngine's ``startswith("--blas")``; generic options,
    options in a setup.py that never reads sys.argv, and one that does not parse: none."""
    from prebuild.tool.builder.build_switches import argv_advice, argv_switches

    unicore = (
        "import sys\n"
        "DISABLE = True\n"
        "filtered = []\n"
        "for arg in sys.argv:\n"
        '    if arg == "--enable-cuda-ext":\n'
        "        DISABLE = False\n"
        "        continue\n"
        "    filtered.append(arg)\n"
    )
    assert argv_switches(unicore) == [("--enable-cuda-ext", 5)]
    apex = (
        "import sys\n"
        'if "--help" in sys.argv: pass\n'
        'if "--cpp_ext" in sys.argv:\n'
        '    sys.argv.remove("--cpp_ext")\n'
        'if "--cuda_ext" not in sys.argv: pass\n'
        'blas = [a for a in sys.argv if a.startswith("--blas=")]\n'
    )
    assert argv_switches(apex) == [("--cpp_ext", 3), ("--cuda_ext", 5), ("--blas", 6)]
    assert argv_switches('if os.environ.get("X") == "--cpp_ext": pass\n') == []
    assert argv_switches('print "sys.argv"; x == "--cpp_ext"\n') == []  # Python 2: unparsable
    advice = argv_advice([("--enable-cuda-ext", 5)], "prebuild wheel --arch sm_90 ./Uni-Core")
    assert "looks for --enable-cuda-ext (line 5) on its command line" in advice
    assert advice.endswith(
        "prebuild wheel --arch sm_90 ./Uni-Core -C--global-option=--enable-cuda-ext"
    )
