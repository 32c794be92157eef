"""The ``sitecustomize`` of a classic project's build: two changes to torch, each made only where
classic.py asks for it by a variable, both when the module is first imported (torch is not
imported here).

**torch.cuda's answer** (``PREBUILD_GPU_ANSWER="9.0"``). On a machine with no GPU visible,
``torch.cuda`` answers as a GPU of the arch being built would, for a project whose setup.py
chooses CUDA by ``torch.cuda.is_available()`` (DCNv2 0.4, pytorch/extension-cpp: with no GPU they
build for the CPU only, a wheel prebuild must refuse). ``prebuild wheel`` was asked for GPU code,
so the answer is the one the wheel's machines would give: ``is_available()`` is True,
``device_count()`` at least 1, ``get_device_capability()`` the newest arch being built (projects
that ask it choose their archs from it, and the nvcc shim compiles for the asked archs anyway),
``is_bf16_supported()`` what that arch has, ``current_device()`` 0, and
``get_device_properties()`` its ``major``, ``minor`` and ``name`` (NATTEN 0.21.7 reads the
capability so; any other property raises AttributeError, saying why), ``get_device_name()`` that
name. Nothing else of torch.cuda changes: a setup.py that uses the GPU itself still fails, as it
would on any machine without one (classic.py then builds again with torch's own answers).
``nvidia-smi`` answers the same (run as a script, this file is the build's nvidia-smi, first on
its PATH): ``--query-gpu=compute_cap`` (and ``name``, ``count``, ``index``) and ``-L``, for a
setup.py that asks it for the arch to build; anything else fails as it does with no driver.

**ninja back on** (``PREBUILD_NINJA=1``). A project whose setup.py builds with
``BuildExtension.with_options(use_ninja=False)`` (PyG's torch-scatter, torch-cluster,
torch-spline-conv, torch-sparse, and many copies of their setup.py) compiles its sources one at
a time, and a stopped build starts over. torch's BuildExtension then takes ``use_ninja=True``
whatever it is given: the same compiler commands, run by ninja, ``MAX_JOBS`` at a time, and
ninja compiles only what is missing when the build goes on.

**Known system headers checked before compiling** (``PREBUILD_SYSTEM_HEADERS``: the headers'
pattern and the compiler's own include directories, as JSON). Before setuptools' ``build_ext``
compiles an extension, its sources, and the project's own headers they include, are read for an
``#include <...>`` of a known system library (source_gaps.SYSTEM_LIBRARIES) that no include
directory of the build has: the build stops at once, naming it, instead of failing on it
minutes later (torchsparse 385f5ce compiled for 6 minutes before ``hashmap_cpu.hpp`` met its
missing ``google/dense_hash_map``). Only what is included whatever the macros say counts (an
``#include`` inside ``#if``/``#ifdef`` does not, a header's include guard aside): a header the
compiler might never look for never stops a build. Where an include directory of the extension
inside the project is empty (a git submodule not fetched), every header no directory has
counts, not only the known ones. Any error of the check itself skips it, and
``PREBUILD_NO_HEADER_CHECK=1`` turns it off (for a directory the compiler searches that the
check cannot see: a project's ``build_ext`` calling the compiler with flags of its own).

classic.py copies this file as ``sitecustomize.py`` into a directory put first on the build's
``PYTHONPATH``; a ``sitecustomize`` the environment had runs after it. Standard library only:
it runs at the start of every Python process of the build.
"""

from __future__ import annotations

import collections
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import sys

ENV_CAPABILITY = "PREBUILD_GPU_ANSWER"  # "9.0": the capability torch.cuda answers with
ENV_NINJA = "PREBUILD_NINJA"  # "1": torch's BuildExtension builds with ninja
# JSON {"pattern": the known system headers' regex, "dirs": the compilers' own include dirs}
ENV_HEADERS = "PREBUILD_SYSTEM_HEADERS"
# The last line of a build the header check stopped (classic.py builds it again no other way).
STOPPED = "prebuild: stopped before compiling"
# Set by the user (to 1): classic.py asks for no header check.
ENV_NO_CHECK = "PREBUILD_NO_HEADER_CHECK"
# What answers, as the user is told (build_switches.gpu_answer_note).
ANSWERED = (
    "is_available, device_count, get_device_capability, is_bf16_supported, current_device, "
    "get_device_properties (major, minor, name), get_device_name"
)


def capability(value: str) -> tuple[int, int] | None:
    """``"9.0"`` -> (9, 0); None for anything else."""
    major, dot, minor = value.partition(".")
    return (int(major), int(minor)) if dot and major.isdigit() and minor.isdigit() else None


def gpu_name(cap: tuple[int, int]) -> str:
    """The answer's GPU name: what it is, no product it is not."""
    return f"a GPU of compute capability {cap[0]}.{cap[1]} (prebuild's build-time answer)"


class Properties:
    """``get_device_properties()``'s answer: what the capability says, nothing made up."""

    def __init__(self, cap: tuple[int, int]):
        self.major, self.minor = cap
        self.name = gpu_name(cap)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"torch.cuda.get_device_properties().{name}: no GPU is visible in this prebuild "
            "build, and its answer holds only what the arch being built says (major, minor, name)"
        )

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor})"


def answer(cuda, cap: tuple[int, int]) -> None:
    """Make the module ``cuda`` (torch.cuda) answer as a GPU of capability ``cap`` would."""
    real_count = cuda.device_count
    properties = Properties(cap)
    cuda.is_available = lambda: True
    cuda.device_count = lambda: max(1, real_count())
    cuda.get_device_capability = lambda device=None: cap
    # DeepSpeed's setup.py records it (bf16 from sm_80 on); torch's own asks the device.
    cuda.is_bf16_supported = lambda including_emulation=True: cap >= (8, 0)
    # torch's own initialise CUDA, which fails with no driver.
    cuda.current_device = lambda: 0
    cuda.get_device_properties = lambda device=None: properties
    cuda.get_device_name = lambda device=None: properties.name


# What the build's nvidia-smi answers (as the user is told: build_switches.gpu_answer_note).
NVIDIA_SMI_ANSWERS = "--query-gpu=compute_cap,name,count,index with --format=csv, and -L"
# nvidia-smi's own words and exit status where it finds no driver.
_NO_DRIVER = (
    9,
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    f"(prebuild's build-time nvidia-smi answers {NVIDIA_SMI_ANSWERS} only)",
)


def nvidia_smi(argv: list[str], cap: tuple[int, int]) -> tuple[int, str, str]:
    """Pure: what the build's ``nvidia-smi`` prints (exit status, stdout, stderr) for
    ``argv`` where no GPU is visible: one GPU of capability ``cap``, as torch.cuda answers. A
    setup.py asking ``nvidia-smi --query-gpu=compute_cap --format=csv,noheader`` for the arch
    to build then builds the arch asked for; anything else fails as nvidia-smi does without a
    driver, so that the setup.py falls back as it would on such a machine."""
    options, rest, args = {}, [], list(argv)
    while args:
        arg = args.pop(0)
        key, eq, value = arg.partition("=")
        if key in ("--query-gpu", "--format", "--id", "-i") and not eq and args:
            value, eq = args.pop(0), "="
        if key in ("--query-gpu", "--format", "--id", "-i") and eq:
            options["--id" if key == "-i" else key] = value
        else:
            rest.append(arg)
    if options.get("--id", "0") != "0":
        return 6, "", "No devices were found"
    name = gpu_name(cap)
    if rest in (["-L"], ["--list-gpus"]) and "--query-gpu" not in options:
        return 0, f"GPU 0: {name} (UUID: GPU-prebuild-build-time-answer)\n", ""
    if not rest and not options:
        return 0, f"prebuild's build-time answer: one GPU, {name}\n", ""
    if rest or "--query-gpu" not in options:
        return _NO_DRIVER[0], "", _NO_DRIVER[1]
    values = {"compute_cap": f"{cap[0]}.{cap[1]}", "name": name, "count": "1", "index": "0"}
    fields = [f.strip() for f in options["--query-gpu"].split(",") if f.strip()]
    if not fields or any(f not in values for f in fields):
        return _NO_DRIVER[0], "", _NO_DRIVER[1]
    form = [f.strip() for f in options.get("--format", "csv").split(",")]
    header = [] if "noheader" in form else [", ".join(fields)]
    return 0, "\n".join([*header, ", ".join(values[f] for f in fields)]) + "\n", ""


def use_ninja(cpp_extension) -> None:
    """Make the module ``cpp_extension`` (torch.utils.cpp_extension) build with ninja, whatever
    the project's BuildExtension (or its with_options subclass) is given. Its include
    directories are made absolute first: ninja runs the compiler in the build's temporary
    directory, not where setup.py runs, and a relative one (torch-batch-svd's
    ``torch_batch_svd/include``) would name nothing there. Without ninja the compiler runs where
    setup.py does: the same directories."""
    build_extension = cpp_extension.BuildExtension
    init = build_extension.__init__
    build_extensions = build_extension.build_extensions

    def __init__(self, *args, **kwargs):
        kwargs["use_ninja"] = True
        init(self, *args, **kwargs)

    def absolute_includes(self):
        self.compiler.include_dirs = absolute_paths(self.compiler.include_dirs, os.getcwd())
        for extension in self.extensions:
            extension.include_dirs = absolute_paths(extension.include_dirs, os.getcwd())
        build_extensions(self)

    build_extension.__init__ = __init__
    build_extension.build_extensions = absolute_includes


def absolute_paths(paths, where: str) -> list:
    """Pure: ``paths`` (strings or path objects), each relative one joined to ``where``."""
    return [p if os.path.isabs(p) else os.path.join(where, p) for p in paths or []]


# A preprocessor directive (the name, the rest of its line), and C/C++ comments.
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INCLUDED = re.compile(r'\s*(?:<([^>\s]+)>|"([^"\s]+)")')
_GUARD = re.compile(r"^(?:ifndef\s+(\w+)|if\s+!\s*defined\s*\(?\s*(\w+)\s*\)?)\s*$")


def unconditional_includes(text: str) -> list[tuple[int, str, bool]]:
    """Pure: the ``#include``s of a C/C++/CUDA file's text that no ``#if``, ``#ifdef`` or
    ``#ifndef`` encloses (its include guard aside), comments left out: (line, name, whether in
    angle brackets)."""
    text = _COMMENT.sub(lambda m: "\n" * m[0].count("\n"), text)
    directives, line, at = [], 1, 0
    for m in _DIRECTIVE.finditer(text):
        line += text.count("\n", at, m.start())
        at = m.start()
        directives.append((line, m[1], m[2].strip()))
    directives = [d for d in directives if d[1] != "pragma"]  # ``#pragma once`` first
    guard = None  # the include guard's macro, while its #ifndef is open
    if len(directives) >= 2:
        first = _GUARD.match(f"{directives[0][1]} {directives[0][2]}")
        name = first and (first[1] or first[2])
        if name and directives[1][1] == "define" and directives[1][2].split()[:1] == [name]:
            guard = name
    found, depth = [], 0
    for at, (line, name, rest) in enumerate(directives):
        if name in ("if", "ifdef", "ifndef"):
            depth += 1
        elif name == "endif":
            depth -= 1
        elif name == "include" and depth == (1 if guard else 0):
            m = _INCLUDED.match(rest)
            if m:
                found.append((line, m[1] or m[2], m[1] is not None))
        if guard and depth == 0 and at > 0:  # past the guard's #endif: nothing is guarded
            guard = None
    return found


def flag_include_dirs(words) -> list:
    """Pure: the directories compiler flags add to the include search: ``-I`` (``-Idir`` or
    ``-I dir``), ``-isystem``, ``-idirafter`` and nvcc's ``--include-path`` (``=dir`` too)."""
    words, dirs = [w for w in words or [] if isinstance(w, str)], []
    for at, word in enumerate(words):
        if word in ("-I", "-isystem", "-idirafter", "--include-path"):
            dirs += words[at + 1 : at + 2]
        elif word.startswith("--include-path="):
            dirs.append(word.split("=", 1)[1])
        elif word.startswith("-I"):
            dirs.append(word[2:])
    return dirs


def missing_system_headers(
    sources, dirs, root: str, pattern, quoted: bool = False, limit: int = 5000
) -> list:
    """The known system headers (``pattern``) that ``sources``, or the headers under ``root``
    they include, include unconditionally and none of ``dirs`` has: (file, line, header), the
    first place each is included. Quoted includes are looked for beside their file first, and
    count only with ``quoted``."""
    root = os.path.realpath(root)
    queue = collections.deque(os.path.realpath(s) for s in sources if os.path.isfile(s))
    seen, missing = set(), {}
    while queue and len(seen) < limit:
        path = queue.popleft()
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        for line, name, angle in unconditional_includes(text):
            places = dirs if angle else [os.path.dirname(path), *dirs]
            found = next((c for d in places if os.path.isfile(c := os.path.join(d, name))), None)
            if found is None:
                if (angle or quoted) and pattern.fullmatch(name) and name not in missing:
                    missing[name] = (path, line, name)
            elif _inside(found, root):
                queue.append(os.path.realpath(found))
    return list(missing.values())


def check_headers(build_ext_module, spec: dict) -> None:
    """Make setuptools' ``build_ext`` (the module ``build_ext_module``) check an extension's
    known system headers just before it compiles it (after what a project's own ``build_ext``
    adds to it): a header none of the build's include directories has stops the build, naming
    it and where it is included. An ``optional`` extension is not checked: setuptools skips it
    when it does not compile."""
    command = build_ext_module.build_ext
    build_extension = command.build_extension
    pattern = re.compile(spec["pattern"])

    def checked(self, extension):
        try:
            optional = getattr(extension, "optional", False)
            empty, missing = ([], []) if optional else _missing_for(self, extension, pattern, spec)
        except Exception:  # the check's own failure never stops a build
            empty, missing = [], []
        if missing:
            here = os.getcwd()

            def shown(path):
                return os.path.relpath(path, here) if path.startswith(here + os.sep) else path

            for path, line, name in missing:
                print(
                    f"prebuild: {shown(path)}:{line}: <{name}> is in no include directory of "
                    "the build",
                    file=sys.stderr,
                )
            for folder in empty:
                print(f"prebuild: its include directory {shown(folder)} is empty", file=sys.stderr)
            print(
                f"{STOPPED}: the headers above are missing (where the compiler finds them in a "
                f"directory this check does not see, build with {ENV_NO_CHECK}=1)",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(1)  # not an Exception: a project's own ``except`` lets it through
        build_extension(self, extension)

    command.build_extension = checked


def _missing_for(command, extension, pattern, spec: dict) -> tuple[list, list]:
    """The project's include directories of an extension ``command`` (a build_ext) builds
    that are empty, where headers are missing, and ``missing_system_headers`` of it, with the
    include directories the compiler would search for it. With such an empty directory (a git
    submodule not fetched: diff-gaussian-rasterization's ``third_party/glm``) every header no
    directory has counts, not only the known ones."""
    here = os.getcwd()
    compiler = getattr(command, "compiler", None)
    args = extension.extra_compile_args
    flags = [w for v in args.values() for w in v] if isinstance(args, dict) else args
    own = absolute_paths([*(extension.include_dirs or []), *flag_include_dirs(flags)], here)
    empty = [d for d in dict.fromkeys(own) if _inside(d, here) and _empty(d)]
    dirs = [
        *own,
        *(getattr(compiler, "include_dirs", None) or []),
        *(command.include_dirs or []),
        *flag_include_dirs(getattr(compiler, "compiler_so", None)),
    ]
    for name in ("CPPFLAGS", "CFLAGS", "CXXFLAGS"):
        dirs += flag_include_dirs(os.environ.get(name, "").split())
    for name in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):
        dirs += [d for d in os.environ.get(name, "").split(os.pathsep) if d]
    dirs += spec.get("dirs") or []
    sources = absolute_paths(extension.sources, here)
    if empty:
        pattern = re.compile(".+")
    dirs = absolute_paths(dirs, here)
    missing = missing_system_headers(sources, dirs, here, pattern, quoted=bool(empty))
    return (empty if missing else []), missing


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is in the directory ``root`` (links followed)."""
    return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)


def _empty(folder: str) -> bool:
    """Whether a directory is there and holds nothing, as a git submodule not fetched is (one
    that is not there at all is as often a directory a setup.py names in vain)."""
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:
        return False


class _Loader(importlib.abc.Loader):
    """A module's own loader, then the change made to it."""

    def __init__(self, loader, change):
        self._loader, self._change = loader, change

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._change(module)

    def __getattr__(self, name):  # get_filename, get_data, is_package, ...: the module's own
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, changes):
        self._changes = changes  # module name -> the change made once it is imported

    def find_spec(self, fullname, path=None, target=None):
        change = self._changes.get(fullname)
        if change is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, change)
        return spec


def changes(environ) -> dict:
    """Pure: what ``environ`` asks to change, by module name."""
    asked = {}
    cap = capability(environ.get(ENV_CAPABILITY, ""))
    if cap is not None:
        asked["torch.cuda"] = lambda cuda: answer(cuda, cap)
    if environ.get(ENV_NINJA) == "1":
        asked["torch.utils.cpp_extension"] = use_ninja
    spec = read_headers_spec(environ.get(ENV_HEADERS, ""))
    if spec is not None:
        asked["setuptools.command.build_ext"] = lambda module: check_headers(module, spec)
    return asked


def read_headers_spec(value: str) -> dict | None:
    """Pure: ENV_HEADERS' value read (None for anything but the JSON classic.py writes)."""
    try:
        spec = json.loads(value) if value else None
        re.compile(spec["pattern"])
    except (ValueError, TypeError, KeyError, re.error):
        return None
    return spec if isinstance(spec.get("dirs", []), list) else None


def install(environ=os.environ) -> bool:
    """Make the changes ``environ`` asks for, each from its module's first import on."""
    asked = changes(environ)
    if asked:
        sys.meta_path.insert(0, _Finder(asked))
    return bool(asked)


def run_next_sitecustomize() -> None:
    """The ``sitecustomize`` the environment would have run without this one, if any: the next
    one on sys.path after this file's directory (never an earlier one: two such directories on
    the path would otherwise run each other without end)."""
    here = os.path.dirname(os.path.abspath(__file__))
    places = [os.path.abspath(p or os.curdir) for p in sys.path]
    after = places.index(here) + 1 if here in places else 0
    path = [p for p in sys.path[after:] if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    install()
    run_next_sitecustomize()
elif __name__ == "__main__":  # the build's nvidia-smi (classic.site_env writes its script)
    cap = capability(os.environ.get(ENV_CAPABILITY, ""))
    code, out, err = nvidia_smi(sys.argv[1:], cap) if cap else (*_NO_DRIVER[:1], "", _NO_DRIVER[1])
    sys.stdout.write(out)
    if err:
        print(err, file=sys.stderr)
    sys.exit(code)
