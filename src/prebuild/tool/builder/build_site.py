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

**ninja back on** (``PREBUILD_NINJA=1``). A project whose setup.py builds with
``BuildExtension.with_options(use_ninja=False)`` (PyG's torch-scatter, torch-cluster,
torch-spline-conv, torch-sparse, and many copies of their setup.py) compiles its sources one at
a time, and a stopped build starts over. torch's BuildExtension then takes ``use_ninja=True``
whatever it is given: the same compiler commands, run by ninja, ``MAX_JOBS`` at a time, and
ninja compiles only what is missing when the build goes on.

classic.py copies this file as ``sitecustomize.py`` into a directory put first on the build's
``PYTHONPATH``; a ``sitecustomize`` the environment had runs after it. Standard library only:
it runs at the start of every Python process of the build.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

ENV_CAPABILITY = "PREBUILD_GPU_ANSWER"  # "9.0": the capability torch.cuda answers with
ENV_NINJA = "PREBUILD_NINJA"  # "1": torch's BuildExtension builds with ninja
# What answers, as the user is told (build_switches.gpu_answer_note).
ANSWERED = (
    "is_available, device_count, get_device_capability, is_bf16_supported, current_device, "
    "get_device_properties (major, minor, name), get_device_name"
)


def capability(value: str) -> tuple[int, int] | None:
    """``"9.0"`` -> (9, 0); None for anything else."""
    major, dot, minor = value.partition(".")
    return (int(major), int(minor)) if dot and major.isdigit() and minor.isdigit() else None


class Properties:
    """``get_device_properties()``'s answer: what the capability says, nothing made up."""

    def __init__(self, cap: tuple[int, int]):
        self.major, self.minor = cap
        self.name = f"a GPU of compute capability {cap[0]}.{cap[1]} (prebuild's build-time answer)"

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
    return asked


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
