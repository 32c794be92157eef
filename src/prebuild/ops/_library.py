"""The package's own compiled libraries, loaded once when the first op module is imported,
and the one place that says which op namespace the public functions launch.

Every op family registers its fake and autograd kernels (``_registration.register_ops``)
through ``for_each_namespace``: for ``prebuild`` (the production kernels) at import, and for
``prebuild_simt`` (the CUDA block bodies run on the CPU, a test library) once ``load_simt``
has loaded it. The public functions
call ``kernels()``: ``torch.ops.prebuild``, or ``torch.ops.prebuild_simt`` inside
``prebuild.testing.use_simt()``. Each namespace's autograd formula calls that namespace's
backward op (the families bind it when they register).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import torch

from prebuild.runtime import load_package

LIBRARY = load_package(Path(__file__).resolve().parent.parent)

PRODUCTION = "prebuild"
SIMT = "prebuild_simt"
_namespaces = [PRODUCTION]
_registrations: list[Callable[[str], None]] = []
_active = [PRODUCTION]


def for_each_namespace(register: Callable[[str], None]) -> Callable[[str], None]:
    """Runs ``register(namespace)`` for every loaded op namespace, now and on later loads."""
    _registrations.append(register)
    for namespace in _namespaces:
        register(namespace)
    return register


def load_simt() -> None:
    """Loads the simt test library (once) and registers every family's kernels for it."""
    if SIMT in _namespaces:
        return
    LIBRARY.load_optional("simt")
    _namespaces.append(SIMT)
    for register in _registrations:
        register(SIMT)


def kernels():
    """The op namespace the public functions launch: torch.ops.prebuild, or
    torch.ops.prebuild_simt inside prebuild.testing.use_simt()."""
    return getattr(torch.ops, _active[-1])


def namespace() -> str:
    """The name of ``kernels()``, for an autograd.Function to carry to its backward."""
    return _active[-1]


def push_namespace(namespace: str) -> None:
    if namespace not in _namespaces:
        raise RuntimeError(f"op namespace {namespace!r} is not loaded")
    _active.append(namespace)


def pop_namespace() -> None:
    if len(_active) == 1:
        raise RuntimeError("pop_namespace without a matching push_namespace")
    _active.pop()


def below_autograd():
    """For an autograd.Function's forward: its ops' calls skip their own autograd formulas
    (the Python of torch.library's, ~10 us a call) and go straight to the kernels. Under
    torch.compile, which traces the Function itself, a no-op."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return torch._C._AutoDispatchBelowAutograd()


def below_autograd_in_backward():
    """For a backward formula: with nothing to record (grad mode off, no create_graph) its ops
    go straight to the kernels, past the Python of the backward ops' double-backward refusals
    (~50 us a call, torch.library's autograd kernel). Under create_graph they pass through
    autograd, where those refusals raise."""
    if torch.is_grad_enabled():
        return contextlib.nullcontext()
    return below_autograd()
