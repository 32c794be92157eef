"""The one way an op family registers its Python kernels, and the public functions' way into
a differentiable kernel.

``register_ops`` does, for every op namespace (``prebuild``, and ``prebuild_simt`` once the
simt test library is loaded): the fake (meta) kernel of each op, the autograd formula of each
differentiable op (``setup_context`` and ``backward(ops, ctx, *grads)``, ``ops`` that
namespace's), and for each backward op a formula that refuses a double backward (without one,
a double backward would silently drop the second-order term).

``call`` runs a differentiable op through an autograd.Function per op and namespace with the
op's own formula. Calling the op itself reaches the same formula through
``torch.library.register_autograd``, which is what direct calls of ``torch.ops.prebuild.*``
(and ``opcheck``) use; that path rebuilds the op's defaulted arguments from its schema at
every call (``fill_defaults``: about 50 us per call for a 14-argument op, a tenth of a small
rasterization step's host time) and enters Python twice. Here the kernel is called below
autograd directly, in eager mode; under torch.compile the public functions call the op itself.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from prebuild.ops._library import (
    below_autograd,
    below_autograd_in_backward,
    for_each_namespace,
    kernels,
    namespace,
)

_functions: dict[tuple[str, str], type[torch.autograd.Function]] = {}


def register_ops(
    fakes: dict[str, Callable],
    formulas: dict[str, tuple[Callable, Callable]] | None = None,
    no_double_backward: tuple[str, ...] = (),
    double_backward_error: str = "",
    fast: tuple[str, ...] = (),
) -> None:
    """Registers an op family's Python kernels for every op namespace: ``fakes`` (op -> fake
    kernel), ``formulas`` (op -> (setup_context, backward(ops, ctx, *grads))), the ops in
    ``no_double_backward`` refusing a backward through them with ``double_backward_error``
    (NotImplementedError), and a Function for each op of ``fast`` (what ``call`` runs)."""
    formulas = formulas or {}

    def refuse(ctx, *grads):
        raise NotImplementedError(double_backward_error)

    @for_each_namespace
    def _register(ns: str) -> None:
        ops = getattr(torch.ops, ns)
        for name, fake in fakes.items():
            torch.library.register_fake(f"{ns}::{name}")(fake)
        for name, (setup_context, backward) in formulas.items():
            torch.library.register_autograd(
                f"{ns}::{name}", partial(_run_backward, backward, ops), setup_context=setup_context
            )
        for name in no_double_backward:
            torch.library.register_autograd(
                f"{ns}::{name}", refuse, setup_context=lambda ctx, inputs, output: None
            )
        for name in fast:
            setup_context, backward = formulas[name]
            _functions[ns, name] = _function(ops, name, setup_context, backward)


def _run_backward(backward: Callable, ops, ctx, *grads):
    with below_autograd_in_backward():
        return backward(ops, ctx, *grads)


def _function(ops, name: str, setup_context: Callable, backward: Callable):
    """An autograd.Function running op ``name`` below autograd with its formula.

    Its forward takes ``ctx`` and calls ``setup_context`` itself: a Function with a separate
    ``setup_context`` binds its arguments with ``inspect.signature`` at every ``apply`` (torch's
    ``bind_default_args``, ~30 us a call)."""
    op = getattr(ops, name).default

    def forward(ctx, *args):
        with below_autograd():
            output = op(*args)
        setup_context(ctx, args, output)
        return output

    return type(
        f"{name}_function",
        (torch.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(lambda ctx, *grads: _run_backward(backward, ops, ctx, *grads)),
        },
    )


def call(name: str, *args):
    """``kernels().<name>(*args)``, in eager mode through its Function (``register_ops``'s
    ``fast``). Under torch.compile the op itself: dynamo traces it with its fake
    kernel and registered autograd (torch 2.11's dynamo cannot trace the Function's call
    below autograd)."""
    if torch.compiler.is_compiling():
        return getattr(kernels(), name)(*args)
    return _functions[namespace(), name].apply(*args)
