"""The guard in every classic wheel prebuild builds: the project's prebuilt extension loads or
says why, and is never compiled at run time behind the user's back.

Most classic projects fall back to a JIT build (``torch.utils.cpp_extension``) when their
extension does not import: gsplat 1.5.3 then deletes ``lock`` in the shared extensions directory,
removes its build directory and compiles for minutes, the lock race prebuild exists to end. The
wheel carries a copy of prebuild's runtime under ``_prebuild_guard_<distribution>/`` and a
``.pth`` file that calls ``install`` at Python's start-up. ``install`` only puts a finder on
``sys.meta_path`` (a dictionary lookup per import: nothing is imported or read then), which acts
on two imports:

- **the project's packages** (``gsplat``): before the package runs, the fit check. The torch
  minor release and CUDA major the wheel was built against, and every visible GPU's compute
  capability (NVML, no CUDA context) against the archs inside, by the rules of prebuild's own
  loader (a wheel of host code only: its torch and CUDA alone). A misfit raises
  ``WheelMisfitError`` (an ImportError) naming the torch or the ``prebuild wheel`` command
  that fits; PTX only is a warning (an error with
  ``PREBUILD_STRICT=1``).
- **torch.utils.cpp_extension**, when something first imports it: its compile entry points are
  wrapped (``load``, ``load_inline`` and two private names, ``_jit_compile``, which every JIT build
  goes through, and ``_get_build_directory``, which gsplat calls before deleting the lock; tests
  fail if torch renames them). A call made on behalf of the project (one of its modules on the
  call stack) while one of its prebuilt modules does not import raises ``JitRefusedError``,
  quoting that module's ImportError, what the wheel was built for and the fix. When all of them
  import, the project is compiling an op the wheel does not hold (DeepSpeed's ops that were not
  built): one warning per op, an error with ``PREBUILD_STRICT=1``. ``PREBUILD_ALLOW_JIT=1`` lets
  every compile go ahead. ``_get_build_directory`` alone, with every prebuilt module
  importing, is a folder's name and no compile (nerfacc 0.3 asks it at every import): let
  through. Other packages' compiles are never touched.
- **a project that compiles when first used** (its wheel holds those compiles, made by
  ``prebuild wheel``: builder/jit_ahead.py): a ``load`` or ``load_inline`` of one of those
  names on behalf of the project returns the wheel's library, after the fit check, and compiles
  nothing (Guard.serve).

A prebuilt module imported before torch (``import swin_window_process`` first), whose library
links torch's, has torch imported for it (the loader finds torch's libraries once torch has
loaded them); one linking the NVIDIA driver's library where there is none says so.

Limits: ``python -S`` and ``-I`` skip ``.pth`` files, and so the guard; a project that runs
nvcc itself, not through torch, is not seen.
"""

from __future__ import annotations

import os
import sys

ALLOW_ENV = "PREBUILD_ALLOW_JIT"
STRICT_ENV = "PREBUILD_STRICT"
CPP_EXTENSION = "torch.utils.cpp_extension"
# What the guard wraps in torch.utils.cpp_extension (tests/runtime/test_classic_guard.py checks
# that torch still has each, and that load and load_inline still reach _jit_compile).
COMPILE_ENTRY_POINTS = ("load", "load_inline", "_jit_compile", "_get_build_directory")
WRAPPED = "__prebuild_guarded__"
NOT_SERVED = object()  # Guard.serve's answer where the project's own call goes ahead
# What of a compile call does not change what it makes (not part of call_key).
UNKEYED = frozenset(
    ("name", "verbose", "build_directory", "keep_intermediates", "with_pytorch_error_handling")
)


def places(root: str) -> list[tuple[str, str]]:
    """The folders whose paths a call_key writes by what they are, longest first (a path is
    written by the deepest that holds it), since the build's and each user's differ (a project
    passing torch's include folders, Python's or the CUDA toolkit's): ``root``, the folder the
    package's files are in, and the site directories as "" (relative to them); Python's
    headers and the toolkit torch found (read off torch.utils.cpp_extension where the project
    imported it) by name. Each as given and with its links resolved.
    Not the environment's prefix nor Python's library folder: where they are /usr, they hold
    the system's own libraries, which are the same paths on every machine."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    cpp_extension = sys.modules.get("torch.utils.cpp_extension")
    named = {
        # the site directory is where the installed package's files are (its ``root``): the
        # other packages' paths are written as the build's copy writes them, relative
        "": [
            root,
            paths.get("purelib"),
            paths.get("platlib"),
            *getattr(site, "getsitepackages", list)(),
            getattr(site, "getusersitepackages", str)(),
        ],
        "<python-include>": [paths.get("include"), paths.get("platinclude")],
        "<cuda>": [getattr(cpp_extension, "CUDA_HOME", None)],
    }
    found: dict[str, str] = {}
    for name, folders in named.items():
        for folder in folders:
            # not a toolkit as wide as /usr (Debian's): it holds what is no environment's own
            wide = name == "<cuda>" and isinstance(folder, str) and folder.count("/") < 2
            if isinstance(folder, str) and os.path.isabs(folder) and not wide:
                for variant in (folder, os.path.realpath(folder)):
                    found.setdefault(variant.rstrip("/") or "/", name)
    return sorted(found.items(), key=lambda place: -len(place[0]))


def call_key(function, args: tuple, kwargs: dict, root: str) -> str:
    """What a call of ``function`` (torch's ``load``, ``load_inline`` or ``_jit_compile``) asks
    to compile, as a short digest: its arguments as passed (UNKEYED's left out), each path in
    them written by the folder that holds it (``places``: relative to ``root``, the folder the
    package's files are in; the environment's folders by name), so that the build's copy and
    the installed package, the build's environment and the user's, give the same key."""
    import hashlib
    import inspect
    import json
    import re

    try:
        passed = inspect.signature(function).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):  # torch's own call will say what is wrong with it
        return ""

    folders = dict(places(root))
    # each folder where a path starts with it (-I/usr/local/cuda/include, not .../cuda-13.0)
    pattern = re.compile("|".join(rf"{re.escape(f)}(?![\w.+-])" for f in folders))

    def canonical(value):
        if isinstance(value, (str, os.PathLike)):
            return pattern.sub(lambda m: folders[m[0]], os.fspath(value))
        if isinstance(value, dict):
            return {str(k): canonical(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [canonical(v) for v in value]
        return value if value is None or isinstance(value, (bool, int, float)) else repr(value)

    keyed = {k: canonical(v) for k, v in passed.items() if k not in UNKEYED}
    text = json.dumps(keyed, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Hooked:
    """A module's own loader, with a step before and one after it runs the module, and the
    error to raise in place of an ImportError of its loading (``failed``, None: its own)."""

    def __init__(self, loader, before=None, after=None, failed=None):
        self._loader, self._before, self._after = loader, before, after
        self._failed = failed  # an ImportError of the module's own -> the one to raise, or None

    def create_module(self, spec):
        try:  # an extension module is loaded here (dlopen)
            return self._loader.create_module(spec)
        except ImportError as exc:
            if needs_torch_first(str(exc)) and "torch" not in sys.modules:
                # imported before torch (`import swin_window_process` first): its libraries
                # link torch's, which the loader finds once torch has loaded them
                try:
                    import torch  # noqa: F401
                except Exception:
                    raise exc from None
                return self._loader.create_module(spec)
            explained = self._failed(spec.name, exc) if self._failed is not None else None
            if explained is None:
                raise
            raise explained from exc

    def exec_module(self, module):
        if self._before is not None:
            self._before(module)
        self._loader.exec_module(module)
        if self._after is not None:
            self._after(module)

    def __getattr__(self, name):  # everything else (resource readers, get_code): the loader's
        return getattr(self._loader, name)


class _Finder:
    """Finds nothing itself: for the names it watches, it asks the finders behind it and
    hooks the loader of the spec they return."""

    def __init__(self, hooks: dict):
        self.hooks = hooks  # module name -> (before, after[, failed]): _Hooked's
        self._searching: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        hook = self.hooks.get(fullname)
        if hook is None or fullname in self._searching:
            return None
        self._searching.add(fullname)
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._searching.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Hooked(spec.loader, *hook)
        return spec


class Guard:
    """One classic wheel's guard. ``config`` (written by the builder into the ``.pth`` line):
    ``distribution``, ``version`` (public), ``packages`` (its top-level import names),
    ``modules`` (its prebuilt extension modules), ``manifest`` (its prebuild.json, relative to
    the site directory), ``build`` (what ``prebuild wheel`` builds it from: ``gsplat==1.5.3``)."""

    def __init__(self, config: dict, site_dir: str):
        self.config = config
        self.site_dir = site_dir
        self.packages = tuple(config["packages"])
        self._warned: set[str] = set()
        self._manifest = None
        self._fits = False  # checked, and it fits: not asked again

    # -- what the wheel is -------------------------------------------------------------
    @property
    def label(self) -> str:
        return f"{self.config['distribution']} {self.config['version']}"

    def manifest(self):
        if self._manifest is None:
            from .manifest import ProjectManifest

            path = os.path.join(self.site_dir, self.config["manifest"])
            with open(path, encoding="utf-8") as f:
                self._manifest = ProjectManifest.from_json(f.read())
        return self._manifest

    def built_for(self) -> str:
        m = self.manifest()
        torch = f"torch {m.torch_needed} ({m.abi_name})" if m.abi_name else f"torch {m.torch}"
        return f"{torch}, CUDA {m.cuda}, {m.holds() or 'no GPU arch'}"

    def build_command(self, arch: str = "sm_XY") -> str:
        return f"prebuild wheel --arch {arch} {self.config['build']}"

    # -- the import-time fit check -----------------------------------------------------
    def check_fit(self, module=None) -> None:
        """Before the project's package (or one of its extension modules: a namespace
        package runs no code of its own) runs: raise WheelMisfitError when this wheel cannot
        run with this torch or on these GPUs; warn when a GPU runs its PTX only. The check
        imports torch, whose libraries the extension modules link against."""
        import warnings

        from .errors import PTXJitWarning

        if self._fits:
            return
        try:
            errors, notes = self.problems(strict=os.environ.get(STRICT_ENV, "") == "1")
        except ImportError:
            return  # no torch: the package's own import of torch will say so
        except (OSError, ValueError) as exc:  # prebuild.json missing or unreadable
            warnings.warn(
                f"{self.label}: prebuild's guard cannot read the wheel's manifest ({exc}), so "
                "nothing was checked at import: the install is damaged; reinstall the wheel",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        for note in notes:
            warnings.warn(note, PTXJitWarning, stacklevel=2)
        if errors:
            from .errors import WheelMisfitError

            raise WheelMisfitError(
                f"{self.label} (this wheel: {self.built_for()}) cannot run here: "
                + " ".join(errors)
                + " (the import check of prebuild's guard)"
            )
        self._fits = True

    def problems(self, strict: bool) -> tuple[list[str], list[str]]:
        """``fit_problems`` for the torch installed here and the GPUs CUDA will see."""
        import torch

        return fit_problems(
            self.manifest(),
            self.config["distribution"],
            self.config["version"],
            self.build_command,
            torch.__version__,
            torch.version.cuda,
            _visible_gpus(),
            strict,
        )

    # -- compiles at run time ----------------------------------------------------------
    def on_behalf(self, frame) -> bool:
        """Whether one of the project's modules is on the call stack above ``frame``."""
        while frame is not None:
            name = frame.f_globals.get("__name__") or ""
            if name.partition(".")[0] in self.packages:
                return True
            frame = frame.f_back
        return False

    def unimportable_modules(self) -> list[tuple[str, str]]:
        """The prebuilt modules that do not import, each with its ImportError."""
        import importlib

        failed = []
        for name in self.config["modules"]:
            try:
                importlib.import_module(name)
            except ImportError as exc:  # what the project's own fallback caught
                failed.append((name, f"{type(exc).__name__}: {exc}"))
        return failed

    def check_compile(self, entry: str, args: tuple, kwargs: dict, frame) -> None:
        if os.environ.get(ALLOW_ENV, "") == "1" or not self.on_behalf(frame):
            return
        what = kwargs.get("name", args[0] if args else "?")
        failed = self.unimportable_modules()
        if failed:
            from .errors import JitRefusedError

            why = "; ".join(f"{name}: {error}" for name, error in failed)
            raise JitRefusedError(
                f"{self.config['distribution']} tried to compile its extension '{what}' at run "
                f"time (torch.utils.cpp_extension.{entry}) because its prebuilt module did not "
                f"import ({why}). This wheel holds it prebuilt ({self.built_for()}) and never "
                f"compiles. {fix + ' ' if (fix := self._fix(why)) else ''}To compile anyway, "
                f"set {ALLOW_ENV}=1."
            )
        if entry == "_get_build_directory":
            # a folder's name, not a compile (nerfacc 0.3 asks it at every import, before its
            # prebuilt module): a compile that follows goes through load(), checked there
            return
        held = (
            f"a build of '{what}' made from other sources or flags than this call's"
            if what in self.config.get("jit", {})
            else f"{', '.join(self.config['modules'])} prebuilt, not '{what}'"
        )
        text = (
            f"{self.config['distribution']} compiles '{what}' at run time "
            f"(torch.utils.cpp_extension.{entry}): this wheel holds {held}"
        )
        if os.environ.get(STRICT_ENV, "") == "1":
            from .errors import JitRefusedError

            raise JitRefusedError(f"{text} (refused because {STRICT_ENV}=1).")
        if what in self._warned:
            return
        self._warned.add(what)
        import warnings

        from .errors import JitWarning

        warnings.warn(
            f"{text}. Build it into the wheel with the project's own switch for it "
            f"({self.build_command()} with that variable set); {STRICT_ENV}=1 refuses such "
            f"compiles, {ALLOW_ENV}=1 silences this.",
            JitWarning,
            stacklevel=4,
        )

    def explain(self, module: str, exc: ImportError) -> ImportError | None:
        """The error to raise for a prebuilt module whose library did not load: where the
        dynamic loader misses a system library the wheel was built linking, or finds the C or
        C++ runtime older than the build machine's, one that says so (WheelMisfitError, an
        ImportError); None for any other failure."""
        try:
            recorded = self.manifest().system_libraries
        except Exception:  # the loader's own error is raised as it is
            return None
        from .c_runtimes import machine_glibc, version_problem

        problem = (
            system_library_problem(recorded, str(exc), self.build_command())
            or driver_problem(str(exc))
            or version_problem(str(exc), self.build_command(), machine_glibc())
        )
        if problem is None:
            return None
        from .errors import WheelMisfitError

        return WheelMisfitError(f"{self.label}: {module} cannot load: {problem}")

    def _fix(self, failures: str = "") -> str:
        """The fix for a prebuilt module that does not import (``failures``: its errors), from
        what the fit check finds."""
        try:
            errors, _ = self.problems(strict=False)
        except Exception:  # the message must come out whatever else is broken
            errors = []
        if errors:
            return " ".join(errors)
        from .c_runtimes import OLDER_RUNTIME

        if any(said in failures for said in (SYSTEM_LIBRARY_MISSING, OLDER_RUNTIME)):
            # explain's own words: its fix is in the failure
            return ""
        return (
            "torch and the GPUs fit it, so the install is damaged: reinstall the wheel "
            f"(pip install --force-reinstall --no-deps <the .whl file>) or build one here: "
            f"{self.build_command()}."
        )

    def serve(self, entry: str, original, args: tuple, kwargs: dict, frame):
        """What a compile entry point (``original``) called on behalf of the project returns
        for a compile the wheel holds (its ``jit`` config: name -> the libraries built of it,
        each with the call_key of its call): that library's module, imported
        (``torch.ops.load_library`` for a library of ops, whose path is returned, as torch
        does), after the fit check; for ``_get_build_directory`` of such a name, a path in the
        wheel that is never made (nvdiffrast looks for a stale lock there). NOT_SERVED for a
        call the wheel holds no build of (its name, or the same name with other sources or
        flags), and where PREBUILD_ALLOW_JIT=1 lets the project compile."""
        if os.environ.get(ALLOW_ENV, "") == "1":
            return NOT_SERVED
        name = kwargs.get("name", args[0] if args else None)
        built = self.config.get("jit", {}).get(name)
        if not built or not self.on_behalf(frame):
            return NOT_SERVED
        if entry == "_get_build_directory":
            return os.path.join(self.site_dir, built[0]["path"]) + ".build"
        key = call_key(original, args, kwargs, self.site_dir)
        path = next((b["path"] for b in built if b["key"] == key), None)
        if path is None:
            return NOT_SERVED
        full = os.path.join(self.site_dir, path)
        self.check_fit()
        module = path.split(".")[0].replace("/", ".")
        if module in self.config["modules"]:
            import importlib

            return importlib.import_module(module)  # its failure explained by the finder
        import torch

        torch.ops.load_library(full)
        return full

    def wrap(self, cpp_extension) -> None:
        """Wrap the compile entry points of the torch.utils.cpp_extension module."""
        for entry in COMPILE_ENTRY_POINTS:
            original = getattr(cpp_extension, entry, None)
            if original is None:
                continue
            setattr(cpp_extension, entry, _guarded(self, entry, original))


def _guarded(guard: Guard, entry: str, original):
    import functools

    @functools.wraps(original)
    def guarded(*args, **kwargs):
        frame = sys._getframe(1)
        served = guard.serve(entry, original, args, kwargs, frame)
        if served is not NOT_SERVED:
            return served
        guard.check_compile(entry, args, kwargs, frame)
        return original(*args, **kwargs)

    setattr(guarded, WRAPPED, True)
    return guarded


# What explain's message says, which _fix recognises in a failure (its fix is in it).
SYSTEM_LIBRARY_MISSING = "a system library the machine that built the wheel had"


CANNOT_OPEN = ": cannot open shared object file"
DRIVER_LIBRARY = "libcuda.so.1"


def needs_torch_first(message: str) -> bool:
    """Pure: whether the loader's ``message`` is its failure to find one of torch's libraries
    (``libc10.so: cannot open shared object file``), which importing torch first loads."""
    if CANNOT_OPEN not in message:
        return False
    library = message.partition(CANNOT_OPEN)[0].split()[-1:] or [""]
    return library[0].startswith(("libc10", "libtorch"))


def driver_problem(message: str) -> str | None:
    """Pure: what to say where the loader's ``message`` is its failure to find the NVIDIA
    driver's library, which a library calling the driver API links (tutel's); None otherwise."""
    if f"{DRIVER_LIBRARY}{CANNOT_OPEN}" not in message:
        return None
    return (
        f"it links the NVIDIA driver's {DRIVER_LIBRARY} (it calls the CUDA driver API), which "
        "this machine does not have: it imports only where an NVIDIA driver is installed (a "
        "machine with a GPU, or a container given the host's driver, as `docker run --gpus` "
        "does). torch imports without one; this module does not."
    )


def system_library_problem(recorded, message: str, build_command: str) -> str | None:
    """Pure: what to say where the dynamic loader's ``message`` (``libklu.so.2: cannot open
    shared object file: No such file or directory``) names one of the ``recorded`` system
    libraries the wheel's libraries link (its manifest's); None otherwise."""
    missing = [lib for lib in recorded if f"{lib}: cannot open shared object file" in message]
    if not missing:
        return None
    names = ", ".join(missing)
    return (
        f"it links {names}, {SYSTEM_LIBRARY_MISSING} and this one lacks. Install the package "
        f"that provides it (Debian and Ubuntu: apt-file search {missing[0]} names it; a library "
        "you built yourself: its folder on LD_LIBRARY_PATH), or build the wheel on this "
        f"machine: {build_command}."
    )


def fit_problems(
    manifest,
    distribution: str,
    version: str,
    build_command,
    torch_version: str,
    torch_cuda: str | None,
    gpus,
    strict: bool,
) -> tuple[list[str], list[str]]:
    """Pure: why a classic wheel (``manifest``, a ProjectManifest) cannot run with this torch
    and on these GPUs (``gpus``: nvml.Gpu, or None when they cannot be listed), and the
    warnings to show; each error names its fix. A wheel of host code only runs on any GPU, and
    one of CPU code only with any build of its torch. ``build_command(arch)``: the command that
    builds the project for an arch."""
    from .arch import arch_for_capability, format_capability
    from .compat import gpu_verdict, same_cuda_major, torch_command

    errors: list[str] = []
    wheel_cuda = manifest.torch_cuda or manifest.cuda
    stable = manifest.stable_abi
    get_torch = torch_command(wheel_cuda, manifest.torch_spec)
    here = "sm_XY"
    if gpus:
        here = arch_for_capability(gpus[0].capability).sm
    if not manifest.torch_fits(torch_version) and stable:
        errors.append(
            f"its libraries use PyTorch's stable ABI of torch {manifest.torch_target}, which "
            f"torch {torch_version} predates. Upgrade torch ({get_torch}) or build "
            f"{distribution} for your torch: {build_command(here)}."
        )
    elif not manifest.torch_fits(torch_version):
        errors.append(
            f"a classic extension runs only with the torch minor release it was built against "
            f"({manifest.torch_minor}), and torch {torch_version} is installed. Install that "
            f"torch ({get_torch}) or build {distribution} for your torch: "
            f"{build_command(here)}."
        )
    elif not manifest.needs_cuda:
        pass  # CPU code: any build of that torch loads it
    elif manifest.torch_cuda and torch_cuda is None:
        errors.append(
            f"torch {torch_version} is a CPU build, and the extension needs torch's CUDA "
            f"libraries. Install a CUDA build of torch {manifest.torch_needed}: {get_torch}."
            if not manifest.torch_free
            else f"torch {torch_version} is a CPU build, and the extension needs the CUDA "
            f"{wheel_cuda} libraries a CUDA build of torch brings. Install one: {get_torch}."
        )
    elif manifest.torch_cuda and not same_cuda_major(manifest.torch_cuda, torch_cuda):
        errors.append(
            f"torch {torch_version} uses CUDA {torch_cuda}, and the extension was built with "
            f"CUDA {manifest.torch_cuda}. Install the torch it was built for ({get_torch}) or "
            f"build {distribution} for yours: {build_command(here)}."
        )
    notes: list[str] = []
    for gpu in () if manifest.host_only else gpus or ():
        sm = arch_for_capability(gpu.capability).sm
        verdict = gpu_verdict(
            distribution,
            version,
            manifest.sass_archs,
            manifest.ptx_archs,
            f"cuda:{gpu.index} ({gpu.name}, compute capability {format_capability(gpu.capability)})",
            gpu.capability,
            strict,
            build_command(sm),
        )
        if verdict.error is not None:
            errors.append(str(verdict.error) + ".")
        elif verdict.warning is not None:
            notes.append(verdict.warning)
    return errors, notes


def _visible_gpus():
    from .nvml import NvmlUnavailable, visible_gpus

    try:
        return visible_gpus(dict(os.environ))
    except NvmlUnavailable:
        return None  # no driver: no GPU to check


_installed: dict[str, Guard] = {}


def install(config: dict, site_dir: str | None = None) -> Guard | None:
    """Called by the wheel's ``.pth`` line at start-up: puts the guard's finder on
    ``sys.meta_path``. Never raises (a broken guard must not break Python's start-up): it
    says what went wrong on stderr instead."""
    try:
        name = config["distribution"]
        if name in _installed:
            return _installed[name]
        if site_dir is None:  # the guard's package sits in the site directory
            site_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        guard = Guard(config, site_dir)
        hooks = {package: (guard.check_fit, None) for package in guard.packages}
        for module in config.get("modules", ()):  # simple_knn._C, in a namespace package
            hooks[module] = (guard.check_fit, None, guard.explain)
        hooks[CPP_EXTENSION] = (None, guard.wrap)
        sys.meta_path.insert(0, _Finder(hooks))
        if CPP_EXTENSION in sys.modules:  # imported before the guard was installed
            guard.wrap(sys.modules[CPP_EXTENSION])
        _installed[name] = guard
        return guard
    except Exception as exc:  # pragma: no cover - reported, never raised at start-up
        print(f"prebuild guard for {config!r} not installed: {exc}", file=sys.stderr)
        return None
