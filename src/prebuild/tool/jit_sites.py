"""Where a project compiles at first use instead of at install time: its calls of
torch.utils.cpp_extension's ``load``, ``load_inline`` or private ``_jit_compile`` (as gsplat calls
it), through the module or imported by name. ``prebuild wheel`` names them when a project's
wheel holds no library; ``prebuild doctor`` finds the installed packages that will compile.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

JIT_NAMES = r"(?:load|load_inline|_jit_compile)"


def first_jit_call(text: str) -> int | None:
    """Pure: the line number of the first JIT compile call in a Python file's text (read as
    first_use_triggers reads it); None where it has none, or is not Python this one parses."""
    if "cpp_extension" not in text:  # most files: no parse
        return None
    try:
        calls = _Module("", ast.parse(text)).jit_calls
    except (SyntaxError, ValueError, RecursionError):
        return None
    return min((line for line, _, _ in calls), default=None)


def jit_sites_in(
    files: Iterable[Path],
    root: Path | None,
    limit: int = 3,
    read: Callable[[Path], str] | None = None,
) -> list[str]:
    """``file:line`` of the first JIT call in each of ``files`` that has one, at most
    ``limit``; files named relative to ``root`` (as given when None), read by ``read``."""
    found = []
    for path in sorted(files):
        try:
            text = read(path) if read else path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        number = first_jit_call(text)
        if number is not None:
            found.append(f"{path.relative_to(root) if root else path}:{number}")
            if len(found) == limit:
                break
    return found


# Where a build puts copies of a project's files (setuptools' build/lib, eggs): not its sources.
BUILD_OUTPUTS = ("build", "dist", ".eggs")


def jit_sites(source: Path, limit: int = 3) -> list[str]:
    """The JIT calls of a project's source tree (jit_sites_in over its Python files, the
    copies its build made left out)."""
    files = (
        p
        for p in source.rglob("*.py")
        if p.relative_to(source).parts[0] not in BUILD_OUTPUTS
        and not any(part.endswith(".egg-info") for part in p.relative_to(source).parts)
    )
    return jit_sites_in(files, source, limit)


def site_module(site: str) -> str:
    """Pure: the module a JIT site (``file:line``) lies in: ``knn_cuda/__init__.py:26`` ->
    ``knn_cuda``; a ``src/`` layout's folder is no part of the name."""
    parts = site.rsplit(":", 1)[0].removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    if parts and parts[0] == "src":
        parts.pop(0)
    return ".".join(parts)


_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w\s,()]+)|import\s+([\w.\s,]+))")


def setup_imports_jit(setup_text: str, sites: list[str]) -> tuple[int, str] | None:
    """Pure: the first line of a setup.py that imports a module compiling when imported (one of
    ``sites``' modules, or a package or submodule of one, as ``from knn_cuda import
    __version__`` runs ``knn_cuda/__init__.py``), with its code; None if none does. Such a
    build runs that compile itself, into its copy of the project."""
    jit = {site_module(site) for site in sites}
    for number, line in enumerate(setup_text.splitlines(), 1):
        m = _IMPORT.match(line.split("#", 1)[0])
        if not m:
            continue
        if m[1]:  # from X import a, b: X, and X.a, X.b where they are submodules
            names = [m[1], *(f"{m[1]}.{n}" for n in re.findall(r"\w+", m[2]))]
        else:
            names = [n.split(" as ")[0].strip() for n in m[3].split(",")]
        # importing a.b.c runs a, a.b and a.b.c
        runs = {".".join(n.split(".")[: i + 1]) for n in names for i in range(n.count(".") + 1)}
        if runs & jit:
            return number, line.strip()
    return None


# -- what runs a project's first-use compiles, so that a build can run them ahead of time ------


@dataclass(frozen=True)
class Trigger:
    """What runs a compile: importing ``module``, then calling its module-level ``function``
    with no arguments (None: the import alone), or ``obj.method`` of an object the module makes
    (``call`` False: reading a property, as optimum-quanto's ``ext.lib``). ``site``: the
    compile's ``file:line``. Or Python ``code`` the user gave (``--first-use``), run as it is:
    the call its users make (ColBERT's ``ColBERT.try_load_torch_extensions(False)``)."""

    module: str
    function: str | None
    site: str
    call: bool = True
    # where the package imports ``module`` only under a condition of its own (optimum-quanto's
    # `if torch.version.hip: from .hip import *`): the module whose import must import it
    only_after: str = ""
    code: str = ""

    def __str__(self) -> str:
        if self.code:
            return "; ".join(line.strip() for line in self.code.splitlines() if line.strip())
        if not self.function:
            return f"import {self.module}"
        return f"{self.module}.{self.function}" + ("()" if self.call else "")


def given_trigger(code: str) -> Trigger:
    """Pure: the trigger of code the user gave (``--first-use``); ValueError naming the problem
    where it is not Python."""
    if not code.strip():
        raise ValueError("--first-use was given no code: give the Python that runs the compiles")
    try:
        compile(code, "<--first-use>", "exec")
    except SyntaxError as exc:
        raise ValueError(
            f"--first-use {code!r} is not Python: {exc.msg} (line {exc.lineno}). Give statements "
            "as its users' code runs them, e.g. 'from pkg.ops import Ops; Ops.load(False)'"
        ) from None
    return Trigger("", None, "", code=code)


@dataclass(frozen=True)
class Unreached:
    """A compile no trigger reaches: its ``file:line``, why, and where it is a call its users'
    code can make, an ``example`` of it for ``--first-use``, ``...`` for their arguments."""

    site: str
    why: str
    example: str = ""

    def __str__(self) -> str:
        return f"{self.site} ({self.why})"


def source_module(path: str) -> str:
    """Pure: the import name of a wheel's Python file: ``pkg/sub/__init__.py`` -> ``pkg.sub``."""
    return site_module(f"{path}:0")


def _dotted(node: ast.expr) -> str:
    """Pure: ``torch.utils.cpp_extension`` for the attribute chain of names, "" for anything
    else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


class _Module:
    """What first_use_triggers needs of one Python file: its JIT calls (line, enclosing
    function), its module-level functions (name -> required arguments?), the names each of
    them calls, and the names its module-level code calls."""

    def __init__(self, path: str, tree: ast.Module):
        self.path, self.name = path, source_module(path)
        jit_entries: set[str] = set()  # names bound to load/load_inline/_jit_compile
        modules: set[str] = set()  # names bound to torch.utils.cpp_extension
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "torch.utils.cpp_extension":
                for alias in node.names:
                    if re.fullmatch(JIT_NAMES, alias.name):
                        jit_entries.add(alias.asname or alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils":
                modules |= {a.asname or a.name for a in node.names if a.name == "cpp_extension"}
            elif isinstance(node, ast.Import):
                modules |= {
                    a.asname
                    for a in node.names
                    if a.name == "torch.utils.cpp_extension" and a.asname
                }

        def is_jit(call: ast.Call) -> bool:
            func = call.func
            if isinstance(func, ast.Name):
                return func.id in jit_entries
            if isinstance(func, ast.Attribute) and re.fullmatch(JIT_NAMES, func.attr):
                owner = _dotted(func.value)
                return owner.endswith("cpp_extension") or owner in modules
            return False

        def called(call: ast.Call) -> str:
            func = call.func
            return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")

        self.jit_calls: list[tuple[int, str | None, str]] = []  # line, function, "" or why not
        self.functions: dict[str, bool] = {}  # module-level def -> takes required arguments
        self.calls: dict[str, set[str]] = {}  # module-level def -> names it calls
        self.top_calls: set[str] = set()  # names called as the module runs
        # line of a JIT call in a method's own body -> (class, method, a property?); the
        # methods of its module-level classes that need no argument; its module-level objects
        self.in_methods: dict[int, tuple[str, str, bool]] = {}
        self.bare_methods: set[tuple[str, str]] = set()
        # its static and class methods (called on the class itself), needing arguments or not
        self.on_class: set[tuple[str, str]] = set()
        self.objects: dict[str, str] = {}  # name -> the class called to make it (its name)
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
            ):
                self.objects[node.targets[0].id] = called(node.value)
        # the modules it imports as it runs -> whether only under an `if`
        self.imports: dict[str, bool] = {}
        package = self.name if path.endswith("__init__.py") else self.name.rpartition(".")[0]

        def imports_in(statements: list[ast.stmt], conditional: bool) -> None:
            for node in statements:
                if isinstance(node, ast.If):
                    imports_in(node.body, True)
                    imports_in(node.orelse, True)
                elif isinstance(node, ast.Try):
                    imports_in([*node.body, *node.orelse, *node.finalbody], conditional)
                    for handler in node.handlers:
                        imports_in(handler.body, True)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    for name in _imported(node, package):
                        self.imports[name] = self.imports.get(name, True) and conditional

        imports_in(tree.body, False)

        def visit(node: ast.AST, function: str | None, why: str) -> None:
            for child in ast.iter_child_nodes(node):
                visit_child(node, child, function, why)

        def visit_child(node: ast.AST, child: ast.AST, function: str | None, why: str) -> None:
            top = function is None and not why and isinstance(node, ast.Module | ast.If | ast.Try)
            if isinstance(child, ast.ClassDef) and top:
                # A class's __init__ runs where the class is called: as a function of its name.
                init = next(
                    (
                        f
                        for f in child.body
                        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
                    ),
                    None,
                )
                if init is not None:
                    self.functions[child.name] = _requires_arguments(init.args, bound=True)
                    self.calls.setdefault(child.name, set())
                    visit(init, child.name, "")
                for item in ast.iter_child_nodes(child):
                    if item is init:
                        continue
                    if isinstance(item, ast.FunctionDef):
                        own = (child.name, item.name, _is_property(item))
                        static = _decorated(item, "staticmethod")
                        if static or _decorated(item, "classmethod"):
                            self.on_class.add(own[:2])
                        if not _requires_arguments(item.args, bound=not static):
                            self.bare_methods.add(own[:2])
                        elif own[2]:
                            self.bare_methods.add(own[:2])
                        for line in _own_jit_calls(item, is_jit):
                            self.in_methods[line] = own
                    visit_child(child, item, None, "")
                return
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if top:
                    self.functions[child.name] = _requires_arguments(child.args)
                    self.calls.setdefault(child.name, set())
                    visit(child, child.name, "")
                else:  # a nested function or a method: nothing calls it without its owner
                    reason = f"inside `{child.name}`, a nested function or method"
                    visit(child, function, why or reason)
                return
            if isinstance(child, ast.Lambda):
                visit(child, function, why or "inside a lambda")
                return
            if isinstance(child, ast.Call):
                if is_jit(child):
                    self.jit_calls.append((child.lineno, function, why))
                elif function is None and not why:
                    self.top_calls.add(called(child))
                elif function is not None and not why:
                    self.calls[function].add(called(child))
            visit(child, function, why)

        visit(tree, None, "")


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """Pure: the modules an import statement of a module of ``package`` may import: ``from
    .cuda import *`` -> ``pkg.cuda``; ``from . import a`` -> ``pkg`` and ``pkg.a`` (a submodule or
    a name: either way its name)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".") if package else []
        parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
        base = ".".join([*parts, *([base] if base else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]


def _decorated(method: ast.FunctionDef, name: str) -> bool:
    """Pure: whether a decorator of ``method`` is named ``name`` or ends with it
    (``functools.cached_property`` for "property")."""
    return any(
        (d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")).endswith(name)
        for d in method.decorator_list
    )


def _is_property(method: ast.FunctionDef) -> bool:
    """Pure: whether a method is read as an attribute (``@property``, ``@cached_property``)."""
    return _decorated(method, "property")


def _own_jit_calls(function: ast.FunctionDef, is_jit: Callable[[ast.Call], bool]) -> list[int]:
    """Pure: the lines of the JIT calls in a function's own body (not in functions it holds)."""
    lines, todo = [], list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call) and is_jit(node):
            lines.append(node.lineno)
        todo += ast.iter_child_nodes(node)
    return lines


def _requires_arguments(args: ast.arguments, bound: bool = False) -> bool:
    """Pure: whether a function needs an argument to be called (one without a default, or
    ``*args``: a wrapper passing on what it is given, as a ``load(*args, **kwargs)`` of a
    package's own); ``bound``: a method, whose first argument is its instance."""
    positional = [*args.posonlyargs, *args.args][1 if bound else 0 :]
    keyword_needed = any(d is None for d in args.kw_defaults)
    passes_on = args.vararg is not None
    return len(positional) > len(args.defaults) or keyword_needed or passes_on


# A package's folders of tests (tmol ships tmol/tests/ with extensions of its own): what only
# they compile is not made ahead of time.
TEST_FOLDERS = frozenset({"test", "tests"})


def first_use_triggers(
    sources: Mapping[str, str], depth: int = 3
) -> tuple[list[Trigger], list[Unreached]]:
    """Pure: what runs each JIT compile of a package's Python files (``sources``: path in the
    wheel -> text): its module's import, where the compile runs as the module runs (at module
    level, or in a function the module calls as it runs: KNN_CUDA's ``_knn =
    load_cpp_ext("knn")``), else a call without arguments of the function holding it
    (nvdiffrast's ``_get_plugin()``), or of each function needing none that calls it by name
    through functions needing some, ``depth`` calls up at most (StyleGAN's
    ``bias_act._init()`` calling ``custom_ops.get_plugin(...)``), or the import of each module
    calling one of those as it runs (tmol's ``load_ops(...)``); a class's ``__init__`` counts
    as a function of the class's name (made by calling it); a static or class method needing
    no argument is called on its class. And the compiles nothing reaches, with why, and those
    only the package's tests (TEST_FOLDERS) run. Imports come first, each trigger once."""
    modules = []
    for path, text in sorted(sources.items()):
        try:
            modules.append(_Module(path, ast.parse(text)))
        except (SyntaxError, ValueError, RecursionError):  # a generated file too deep to walk
            continue
    imports: list[Trigger] = []
    calls: list[Trigger] = []
    unreached: list[Unreached] = []
    for module in modules:
        # The module's functions that run as it runs: those it calls, and those they call.
        runs, todo = set(), [n for n in module.top_calls if n in module.functions]
        while todo:
            name = todo.pop()
            if name not in runs:
                runs.add(name)
                todo += [n for n in module.calls.get(name, ()) if n in module.functions]
        for line, function, why in module.jit_calls:
            site = f"{module.path}:{line}"
            owner = module.in_methods.get(line, ("", ""))[:2]
            if owner in module.on_class and owner in module.bare_methods:
                cls, method, _ = module.in_methods[line]  # a static or class method, no argument
                calls.append(Trigger(module.name, f"{cls}.{method}", site))
            elif line in module.in_methods:  # a method of an object some module makes
                found = _objects_reaching(modules, module, *module.in_methods[line])
                calls += [
                    Trigger(m, f"{name}.{method}", site, call) for m, name, method, call in found
                ]
                if not found:
                    unreached.append(_method_unreached(module, site, *module.in_methods[line]))
            elif why:
                unreached.append(Unreached(site, why))
            elif function is None or function in runs:
                imports.append(Trigger(module.name, None, site))
            else:
                found = _callers_without_arguments(modules, module, function, depth)
                if found:
                    for m, f in found:  # f None: another module calls it as it runs
                        (calls if f else imports).append(Trigger(m.name, f, site))
                else:
                    unreached.append(
                        Unreached(
                            site,
                            f"inside `{function}`, which needs arguments and which no function "
                            "of the package that needs none calls",
                            f"from {module.name} import {function}; {function}(...)",
                        )
                    )
    # A module its package imports only under a condition (another platform's code) runs its
    # compiles only where importing the package imports it.
    importers: dict[str, list[str]] = {}
    unconditional: set[str] = set()
    for module in modules:
        for name, conditional in module.imports.items():
            if conditional:
                importers.setdefault(name, []).append(module.name)
            else:
                unconditional.add(name)
    seen: set[tuple[str, str | None]] = set()
    ordered = []
    tests: dict[str, list[str]] = {}  # site -> the test modules that would run it
    for trigger in [*imports, *calls]:
        if (trigger.module, trigger.function) not in seen:
            seen.add((trigger.module, trigger.function))
            if TEST_FOLDERS & set(trigger.module.split(".")):
                tests.setdefault(trigger.site, []).append(trigger.module)
                continue
            if trigger.module in importers and trigger.module not in unconditional:
                trigger = replace(trigger, only_after=importers[trigger.module][0])
            ordered.append(trigger)
    unreached += [
        Unreached(
            site,
            f"in the package's tests ({len(names)} {'module' if len(names) == 1 else 'modules'}: "
            f"{', '.join(names[:3])}{', ...' if len(names) > 3 else ''}), which its users do "
            "not run: not made ahead of time",
        )
        for site, names in tests.items()
    ]
    return ordered, unreached


def _method_unreached(module: _Module, site: str, cls: str, method: str, prop: bool) -> Unreached:
    """Pure: a compile in a method nothing of the package calls (ColBERT's class method
    ``try_load_torch_extensions(use_gpu)``), with the call its users' code makes."""
    needs = (cls, method) not in module.bare_methods
    owner = cls if (cls, method) in module.on_class else f"{cls}(...)"
    why = f"inside the method `{cls}.{method}`, " + (
        "which needs arguments"
        if needs
        else "of an object its users' code makes (no module of the package makes one)"
    )
    call = "" if prop else "(...)" if needs else "()"
    return Unreached(site, why, f"from {module.name} import {cls}; {owner}.{method}{call}")


def _objects_reaching(
    modules: list[_Module], home: _Module, cls: str, method: str, prop: bool
) -> list[tuple[str, str, str, bool]]:
    """The module-level objects of ``home``'s class ``cls`` (made by calling it by name, in any
    module) whose ``method`` needs no argument: (their module, name, the method, called?)."""
    if (cls, method) not in home.bare_methods:
        return []
    return [
        (m.name, name, method, not prop)
        for m in modules
        for name, made_by in m.objects.items()
        if made_by == cls
    ]


def _callers_without_arguments(
    modules: list[_Module], home: _Module, function: str, depth: int
) -> list[tuple[_Module, str | None]]:
    """The functions reaching ``home``'s ``function`` by calls by name that need no
    arguments, ``depth`` levels up at most, through functions that need some: the function
    itself where it needs none. A module that calls one of the functions needing arguments as
    it runs, and imports the module defining it (a package's helper, tmol's ``_ops =
    load_ops(__name__, __file__, [...])`` at module level of each module using it), is one
    too, as (the module, None): its import."""
    if not home.functions.get(function, True):
        return [(home, function)]
    found: dict[tuple[str, str | None], tuple[_Module, str | None]] = {}
    level, seen = {(home.name, function)}, {(home.name, function)}
    for _ in range(depth):
        names = {name for _, name in level}
        for module in modules:
            owners = {owner for owner, name in level if name in module.top_calls}
            if owners and _imports_any(module, owners):
                found.setdefault((module.name, None), (module, None))
        above: set[tuple[str, str]] = set()
        for module in modules:
            for name, calls in module.calls.items():
                if (module.name, name) in seen or not calls & names:
                    continue
                seen.add((module.name, name))
                if module.functions[name]:
                    above.add((module.name, name))  # needs arguments too: one level up
                else:
                    found.setdefault((module.name, name), (module, name))
        if not above:
            break
        level = above
    return list(found.values())


def _imports_any(module: _Module, owners: set[str]) -> bool:
    """Pure: whether ``module`` is one of ``owners`` or imports one of them (or a name of
    one: ``from tmol._load_ext import load_ops``)."""
    return module.name in owners or any(
        name == owner or name.startswith(f"{owner}.") for name in module.imports for owner in owners
    )
