"""The public functions' way into a differentiable kernel: an autograd.Function per op and
namespace with the op's own registered formula (its ``setup_context`` and ``backward``).

Calling the op itself reaches the same formula through ``torch.library.register_autograd``,
which is what direct calls of ``torch.ops.prebuild.*`` (and ``opcheck``) use. That path
rebuilds the op's defaulted arguments from its schema at every call (``fill_defaults``: about
50 us per call for a 14-argument op, a tenth of a small rasterization step's host time) and
enters Python twice. Here the kernel is called below autograd directly, in eager mode; under
torch.compile the public functions call the op itself, as before.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from prebuild.ops._library import below_autograd, for_each_namespace, kernels, namespace

_functions: dict[tuple[str, str], type[torch.autograd.Function]] = {}


def differentiable(name: str, setup_context: Callable, backward: Callable) -> None:
    """Registers, for every op namespace, a Function running ``name`` with the formula
    ``setup_context(ctx, inputs, output)``, ``backward(ops, ctx, *grads)``."""

    @for_each_namespace
    def _register(ns: str) -> None:
        ops = getattr(torch.ops, ns)
        op = getattr(ops, name).default

        def forward(*args):
            with below_autograd():
                return op(*args)

        _functions[ns, name] = type(
            f"{ns}_{name}",
            (torch.autograd.Function,),
            {
                "forward": staticmethod(forward),
                "setup_context": staticmethod(setup_context),
                "backward": staticmethod(lambda ctx, *grads: backward(ops, ctx, *grads)),
            },
        )


def call(name: str, *args):
    """``kernels().<name>(*args)``, in eager mode through its Function (see
    ``differentiable``). Under torch.compile the op itself: dynamo traces it with its fake
    kernel and registered autograd (torch 2.11's dynamo cannot trace the Function's call
    below autograd)."""
    if torch.compiler.is_compiling():
        return getattr(kernels(), name)(*args)
    return _functions[namespace(), name].apply(*args)
