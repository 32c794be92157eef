"""The torch.compile check the op families share: a loss compiled with fullgraph=True gives
the eager loss and gradients."""

from __future__ import annotations

import torch


def assert_compiled_matches_eager(
    loss_fn, *inputs, rtol=1e-6, atol=1e-6, loss_atol=None, grads_nonzero=False
):
    """Compiles ``loss_fn`` (fullgraph: no graph break allowed), runs it and its eager self on
    fresh leaf copies of ``inputs``, and compares the losses (``loss_atol``, default ``atol``)
    and every input's gradient (``grads_nonzero``: each must also reach its input).
    dynamo's caches are reset before and after, so tests do not see each other's graphs."""
    torch._dynamo.reset()
    try:
        compiled = torch.compile(loss_fn, fullgraph=True)
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        eager = [t.detach().clone().requires_grad_(True) for t in inputs]
        loss = compiled(*leaves)
        loss.backward()
        eloss = loss_fn(*eager)
        eloss.backward()
        torch.testing.assert_close(
            loss.detach(), eloss.detach(), rtol=rtol, atol=atol if loss_atol is None else loss_atol
        )
        for a, b in zip(leaves, eager):
            torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol)
            if grads_nonzero:
                assert a.grad.abs().max() > 0
    finally:
        torch._dynamo.reset()
