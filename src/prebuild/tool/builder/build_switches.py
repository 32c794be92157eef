"""What makes a project build its extensions at install time when, left alone, it builds none
and compiles at first use instead (DeepSpeed's ops): the environment variables its own setup.py
reads, found by reading it, and a small table of well-known projects for which reading is not
enough (DeepSpeed names its per-op variables through its op builders). Pure functions over text.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement

from prebuild.tool.builder.build_site import ANSWERED, NVIDIA_SMI_ANSWERS

# os.environ.get("X"), os.environ["X"] (not assigned), os.getenv("X"), and helpers named
# like get_env_if_set("X") / is_env_set("X") / env_flag("X").
_READ = re.compile(
    r"""(?:environ\s*(?:\.get\s*\(|\[)|getenv\s*\(|\b\w*env\w*\s*\()\s*['"]([A-Z][A-Z0-9_]{2,})['"]\s*(?P<after>\S?)"""
)
# A variable that decides what is compiled (not a version string, a path or a verbosity).
# (curobo 0.8's CUROBO_USE_PYBIND=1 builds its extensions at install time; it JIT-compiles else)
_BUILD_WORDS = re.compile(r"BUILD|CUDA|OPS|EXT|COMPILE|ACCELERATOR|WITH_|FORCE|SKIP|USE_")
_NOT_SWITCH_ENDINGS = ("STRING", "VERSION", "_DIR", "_PATH", "_HOME")  # values, not switches
_NOT_SWITCHES = {
    "CUDA_HOME",
    "CUDA_PATH",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "CUDA_VISIBLE_DEVICES",
    "USE_NINJA",  # how it compiles, not what
}


def build_variables(setup_text: str) -> list[str]:
    """Pure: the environment variables a setup.py reads that decide what it compiles, in the
    order they first appear (assignments such as ``os.environ["X"] = ...`` are not reads)."""
    found: list[str] = []
    for match in _READ.finditer(setup_text):
        name = match.group(1)
        if match.group("after") == "]" and re.match(r"\]\s*=[^=]", setup_text[match.end() - 1 :]):
            continue  # os.environ["X"] = ...: set, not read
        if (
            name in _NOT_SWITCHES
            or name.endswith(_NOT_SWITCH_ENDINGS)
            or not _BUILD_WORDS.search(name)
            or name in found
        ):
            continue
        found.append(name)
    return found


@dataclass(frozen=True)
class KnownSwitches:
    """How a well-known project is told to build its extensions at install time."""

    variables: str  # what to set, e.g. "DS_BUILD_OPS=1 (every op) or DS_BUILD_<OP>=1 (one)"
    example: str  # the variables of a typical prebuild command, e.g. "DS_BUILD_FUSED_ADAM=1"
    note: str = ""
    # Where no GPU is visible its setup.py builds for the CPU only unless this variable has this
    # value: known before anything is compiled, so such a build is refused at once.
    no_gpu: tuple[str, str] | None = None


# What every classic build's environment holds, whatever the user's says: the switch by which
# most setup.py files build CUDA where no GPU is visible (pytorch3d, mmcv, DCNv2 forks).
BUILD_ENV = {"FORCE_CUDA": "1"}

# Distribution names as pip normalises them. (flash-attn's FLASH_ATTENTION_FORCE_BUILD=TRUE, which
# makes it compile instead of downloading a wheel, is set by prebuild: forced_build_switches.)
KNOWN = {
    "deepspeed": KnownSwitches(
        "DS_BUILD_OPS=1 (every op) or DS_BUILD_<OP>=1 (one op: DS_BUILD_FUSED_ADAM=1, "
        "DS_BUILD_CPU_ADAM=1, ...), and DS_ACCELERATOR=cuda where no GPU is visible (otherwise "
        "its setup.py picks its CPU accelerator and builds host-only ops)",
        "DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1",
        no_gpu=("DS_ACCELERATOR", "cuda"),
    ),
    # (pytorch3d and mmcv build CUDA where no GPU is visible with FORCE_CUDA=1: BUILD_ENV)
    "mmcv": KnownSwitches("MMCV_WITH_OPS=1", "MMCV_WITH_OPS=1"),
    "apex": KnownSwitches("APEX_CPP_EXT=1 APEX_CUDA_EXT=1", "APEX_CPP_EXT=1 APEX_CUDA_EXT=1"),
}


# A variable that makes a setup.py compile instead of downloading a prebuilt wheel of its own
# (flash-attn, causal-conv1d, mamba-ssm: os.getenv("X_FORCE_BUILD", "FALSE") == "TRUE").
_FORCE_BUILD = re.compile(r"[A-Z0-9_]*_FORCE_BUILD")


def forced_build_switches(setup_text: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Pure: the variables to set so that the project compiles rather than fetches a wheel:
    each ``*_FORCE_BUILD`` its setup.py reads, with the value it compares it to (``"TRUE"``;
    ``"1"`` when it compares with none), unless ``environ`` already sets it."""
    return {
        name: switch_value(setup_text, name)
        for name in build_variables(setup_text)
        if _FORCE_BUILD.fullmatch(name) and name not in environ
    }


def switch_value(setup_text: str, name: str) -> str:
    """Pure: the value a setup.py compares the variable ``name`` with (``os.getenv("X", "FALSE")
    == "TRUE"``: ``TRUE``; ColossalAI's ``int(os.environ.get("BUILD_EXT", "0")) == 1``: ``1``),
    ``"1"`` where it compares it with none."""
    compared = re.search(
        rf"""['"]{re.escape(name)}['"][^)]*\)\s*\)?\s*==\s*(?:['"]([^'"]+)['"]|(\d+)\b)""",
        setup_text,
    )
    return (compared.group(1) or compared.group(2)) if compared else "1"


# What a setup.py asks of the machine's GPU to choose what it builds (its name, as the user is
# told, and how its code says it): most choose between CUDAExtension and CppExtension by
# torch.cuda (DCNv2 0.4); some ask nvidia-smi for the arch to build.
GPU_QUERIES = (
    ("torch.cuda.is_available()", re.compile(r"\bcuda\.is_available\s*\(\s*\)")),
    ("nvidia-smi", re.compile(r"""(?:^|[\s"'\[(])nvidia-smi(?:$|[\s"'])""")),
)


def gpu_query_line(setup_text: str) -> tuple[int, str] | None:
    """Pure: the first line of a setup.py whose code (not a comment) asks the GPU
    (GPU_QUERIES), with what it asks; None if none does."""
    for number, line in enumerate(setup_text.splitlines(), 1):
        code = line.split("#", 1)[0]
        for asked, pattern in GPU_QUERIES:
            if pattern.search(code):
                return number, asked
    return None


def gpu_answer_note(line: int, capability: str, asked: str = "torch.cuda.is_available()") -> str:
    """What the user is told of a build whose setup.py asks the GPU (``asked``, at ``line``) on
    a machine with no GPU visible (build_site.py)."""
    return (
        f"no GPU is visible here, and its setup.py asks {asked} (setup.py line {line}): in its "
        f"build, torch.cuda answers as a GPU of compute capability {capability} would "
        f"({ANSWERED}), and so does nvidia-smi ({NVIDIA_SMI_ANSWERS})"
    )


# BuildExtension.with_options(use_ninja=False), or {"use_ninja": False} passed on
_NINJA_OFF = re.compile(r"""\buse_ninja\s*=\s*False\b|["']use_ninja["']\s*:\s*False\b""")
# ... or a value of its own: DeepSpeed 0.19.8's use_ninja=use_ninja, on only where DS_ENABLE_NINJA
# is set ("for any pre-installed ops force disable ninja")
_NINJA_SET = re.compile(
    r"""\buse_ninja\s*=\s*(?!True\b|False\b)[A-Za-z_][\w.]*\s*[,)]"""
    r"""|["']use_ninja["']\s*:\s*(?!True\b|False\b)[A-Za-z_][\w.]*\s*[,}]"""
)
# A setup.py that replaces the compiler's _compile, which only a build without ninja calls.
_OWN_COMPILE = re.compile(r"\b_compile\b")


def ninja_off_line(setup_text: str) -> int | None:
    """Pure: the line of a setup.py whose code turns torch's ninja backend off (PyG's
    ``BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)``), where turning
    it back on changes only how the same commands run; None otherwise, and where its setup.py
    replaces the compiler's ``_compile`` (which ninja would leave uncalled)."""
    code = [line.split("#", 1)[0] for line in setup_text.splitlines()]
    if any(_OWN_COMPILE.search(line) for line in code):
        return None
    off = (
        n for n, line in enumerate(code, 1) if _NINJA_OFF.search(line) or _NINJA_SET.search(line)
    )
    return next(off, None)


def ninja_note(line: int, jobs: int, setup_text: str = "") -> str:
    """What the user is told of a build whose setup.py turns ninja off at ``line`` (of
    ``setup_text``: or passes it a value of its own there)."""
    lines = setup_text.splitlines()
    own = line <= len(lines) and not _NINJA_OFF.search(lines[line - 1].split("#", 1)[0])
    slow = "compiles one source at a time and starts over when stopped"
    said = (
        f"its setup.py gives torch's ninja backend a setting of its own (setup.py line {line}); "
        f"off, the build {slow}"
        if own
        else f"its setup.py turns torch's ninja backend off (setup.py line {line}), which {slow}"
    )
    return f"{said}: built with ninja ({jobs} at a time; the same compiler commands)"


def ninja_failed(build_log: str) -> str | None:
    """Pure: ninja's own error in a build log (``ninja: error: ...``: two sources with one
    object, a missing input), not a compiler's; None if there is none."""
    found = re.findall(r"^ninja: error: .*$", build_log, re.M)
    return found[-1].strip() if found else None


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# A CMake cache variable with a default and its allowed values (bitsandbytes' COMPUTE_BACKEND:
# set(COMPUTE_BACKEND "cpu" CACHE STRING ...) then set_property(CACHE COMPUTE_BACKEND PROPERTY
# STRINGS cpu cuda hip xpu)), and a CMake option that turns CUDA on (option(WITH_CUDA ... OFF)).
_CMAKE_CACHE = re.compile(r'set\s*\(\s*(\w+)\s+"?([\w.-]*)"?\s+CACHE\s+STRING', re.I)
_CMAKE_STRINGS = re.compile(
    r"set_property\s*\(\s*CACHE\s+(\w+)\s+PROPERTY\s+STRINGS\s+([^)]*)\)", re.I
)
_CMAKE_OPTION = re.compile(r'option\s*\(\s*(\w*(?:CUDA|GPU)\w*)\s+"[^"]*"\s+(OFF|ON)?\s*\)', re.I)
# A variable whose setting leaves something out: never the advice to make a build compile.
_LEAVES_OUT = re.compile(r"SKIP|DISABLE|(?:^|_)NO_")


def cmake_switches(cmakelists: str) -> list[str]:
    """Pure: the ``-D`` settings that make a CMake build compile its CUDA code where its
    defaults do not: a cache variable whose allowed values include ``cuda`` but whose default
    is another (``-DCOMPUTE_BACKEND=cuda``), an option named for CUDA or a GPU that is OFF
    (``-DWITH_CUDA=ON``)."""
    defaults = {m.group(1): m.group(2) for m in _CMAKE_CACHE.finditer(cmakelists)}
    found = []
    for match in _CMAKE_STRINGS.finditer(cmakelists):
        name, values = match.group(1), match.group(2).replace('"', " ").split()
        cuda = next((v for v in values if v.lower() == "cuda"), None)
        if cuda and defaults.get(name, "").lower() != "cuda":
            found.append(f"-D{name}={cuda}")
    for match in _CMAKE_OPTION.finditer(cmakelists):
        if (match.group(2) or "OFF").upper() == "OFF" and not _LEAVES_OUT.search(match.group(1)):
            found.append(f"-D{match.group(1)}=ON")
    return list(dict.fromkeys(found))


def cmake_advice(settings: list[str], command: str) -> str:
    """Pure: how to tell a CMake-built project (``settings``: cmake_switches') to compile its
    CUDA code; "" where there is nothing to tell."""
    if not settings:
        return ""
    joined = " ".join(settings)
    return (
        f"its CMakeLists.txt builds its CUDA code only with {joined}, which a CMake-driven build "
        f"(scikit-build-core, most setup.py wrappers) reads from CMAKE_ARGS: "
        f"CMAKE_ARGS='{joined}' {command}"
    )


# Options any command takes, never a project's build switch.
_GENERIC_OPTIONS = {"--help", "--version", "--verbose", "--quiet", "--user", "--prefix", "--force"}


def argv_switches(setup_text: str) -> list[tuple[str, int]]:
    """Pure: the options a setup.py looks for on its own command line (``sys.argv``), with the
    line of the first look: ``arg == "--enable-cuda-ext"`` in a loop over it (Uni-Core),
    ``"--cuda_ext" in sys.argv`` and ``sys.argv.remove("--cuda_ext")`` (apex before its
    variables), ``arg.startswith("--blas")``. Only in a setup.py that reads ``sys.argv``."""
    if "sys.argv" not in setup_text:
        return []
    try:
        tree = ast.parse(setup_text)
    except (SyntaxError, ValueError):
        return []
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
        ):
            operands = [node.left, *node.comparators]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("remove", "index", "count", "startswith")
        ):
            operands = list(node.args[:1])
        else:
            continue
        for operand in operands:
            if (
                isinstance(operand, ast.Constant)
                and isinstance(operand.value, str)
                and re.fullmatch(r"--[A-Za-z][\w-]*=?", operand.value)
                and operand.value.rstrip("=") not in _GENERIC_OPTIONS
            ):
                option = operand.value.rstrip("=")
                found[option] = min(found.get(option, node.lineno), node.lineno)
    return sorted(found.items(), key=lambda item: item[1])


def argv_advice(switches: list[tuple[str, int]], command: str) -> str:
    """What to tell a user whose project built no extension and whose setup.py looks for
    options on its command line (``argv_switches``): the first, handed to it by prebuild as
    pip's --config-settings would, on every setup.py command (config_settings.setup_option_hint:
    a setup.py may look for it at its top, when asked for its requirements too)."""
    options = ", ".join(f"{option} (line {line})" for option, line in switches)
    first = shlex.quote(f"-C--global-option={switches[0][0]}")
    return (
        f"its setup.py looks for {options} on its command line, which may make it build the "
        f"extension at install time: give it through prebuild, which hands -C settings to its "
        f"backend as pip's --config-settings does: {command} {first}"
    )


def unset_switches(variables: list[str], environ: Mapping[str, str]) -> list[str]:
    """Pure: the build ``variables`` a setup.py reads that ``environ`` does not set and that
    would not leave something out: the ones to advise setting."""
    return [n for n in variables if n not in environ and not _LEAVES_OUT.search(n)]


def has_switches(distribution: str, variables: list[str], environ: Mapping[str, str]) -> bool:
    """Pure: whether switches_advice has switches to name (a known project's, or variables its
    setup.py reads that are not set), rather than saying there are none."""
    return normalize(distribution) in KNOWN or bool(unset_switches(variables, environ))


def switches_advice(
    distribution: str,
    variables: list[str],
    command: str,
    environ: Mapping[str, str] | None = None,
    setup_text: str = "",
) -> str:
    """What to tell a user whose project built no extension: the known project's switches,
    else the variables its setup.py (``setup_text``) reads, the first with the value it
    compares it with (those ``environ`` sets named as set, not as advice); ``command`` is the
    ``prebuild wheel`` command to prefix with them."""
    known = KNOWN.get(normalize(distribution))
    if known is not None:
        note = f" {known.note}" if known.note else ""
        return (
            f"{distribution} builds its extensions at install time only when asked: "
            f"{known.variables}.{note} For example: {known.example} {command}"
        )
    environ = environ or {}
    unset = unset_switches(variables, environ)
    given = ", ".join(f"{name}={environ[name]}" for name in variables if name in environ)
    if unset:
        first = f"{unset[0]}={switch_value(setup_text, unset[0])} {command}"
        return (
            f"its setup.py reads {unset[0]}, which may make it build the extension at "
            f"install time: {first}"
            if len(unset) == 1
            else f"its setup.py reads {', '.join(unset)}: one of them may make it build the "
            f"extension at install time, set when running the command (for example {first})"
        ) + (f" (set here already: {given})" if given else "")
    if given:
        return (
            f"the variables its setup.py reads are set here ({given}), and none made it "
            "compile GPU code"
        )
    return (
        "its setup.py reads no variable that looks like a build switch, so its first import "
        "compiles on each machine"
    )


def no_gpu_refusal(
    distribution: str, environ: Mapping[str, str], gpu_visible: bool, command: str
) -> str | None:
    """Pure: why building ``distribution`` here would make a wheel with no GPU code, known
    before compiling (a well-known project that picks a CPU-only build where no GPU is visible
    unless told otherwise), or None."""
    known = KNOWN.get(normalize(distribution))
    if known is None or known.no_gpu is None or gpu_visible:
        return None
    variable, value = known.no_gpu
    if {**environ, **BUILD_ENV}.get(variable) == value:
        return None
    return (
        f"no GPU is visible here, so {distribution}'s setup.py would build for the CPU only unless "
        f"{variable}={value}: its wheel would hold no GPU code (nothing was compiled). "
        f"{distribution} builds its extensions at install time when asked: {known.variables}. "
        f"For example: {known.example} {command}"
    )


def host_code_asked(distribution: str, environ: Mapping[str, str], gpu_visible: bool) -> bool:
    """Pure: whether a well-known project's build that compiled no GPU code compiled what it
    was asked: its CPU-only choice (KnownSwitches.no_gpu) is ruled out (a GPU visible, or the
    variable set as no_gpu_refusal asks), so the extensions asked are host code by design
    (DeepSpeed's async_io and pin_memory ops, DS_BUILD_AIO=1), not a CPU build for want of a
    GPU."""
    known = KNOWN.get(normalize(distribution))
    if known is None or known.no_gpu is None:
        return False
    variable, value = known.no_gpu
    return gpu_visible or {**environ, **BUILD_ENV}.get(variable) == value


def distribution_of(origin: str, source_name: str) -> str | None:
    """The distribution a classic project is, where its spec or source says so cheaply: a
    requirement's name (``deepspeed==0.19.8``), else an unpacked sdist's folder
    (``deepspeed-0.19.8``); None for anything else (a git URL, a checkout)."""
    try:
        requirement = Requirement(origin)
        if requirement.url is None and "/" not in origin:
            return requirement.name
    except InvalidRequirement:
        pass
    match = re.fullmatch(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*?)-\d[^/]*", source_name)
    return match["name"] if match else None
