"""The trained tensors of an end-to-end model as one flat dict: snapshots, and their running mean (SWA).

An end-to-end model's weights live in three places: the encoder's and the network's state dicts and the
network's row-sparse heads (:class:`~xmtc.neural.heads.RowSparseHead`, outside both state dicts). The
training loop (:mod:`xmtc.neural.training_loop`) keeps them whole three times over: the best validated
epoch's weights (model selection), the running mean of stochastic weight averaging, and the weights in a
checkpoint. All three are one dict of cloned tensors, keyed ``encoder.<name>``, ``network.<name>`` and
``sparse.<head>.weight`` / ``sparse.<head>.bias``: these keys are part of the checkpoint format.

**SWA** (optional; LightXML's option): from epoch ``swa_start`` on, every ``swa_every`` optimiser steps
the mean over the ``n`` snapshots taken so far is updated in place, ``mean += (w - mean) / n`` (written
``mean * (1 - 1/n) + w / n``) on every floating-point tensor; integer buffers keep their first value.

Separate from the loop because it is the one place that knows how an encoder + network pair becomes a
flat dict and back; the loop only decides when to take, average or restore one.
"""

from __future__ import annotations

import torch


def snapshot(encoder, network) -> dict:
    """Every tensor of ``encoder`` and ``network`` (its row-sparse heads too), detached clones in one flat dict."""
    out = {f"encoder.{k}": v.detach().clone() for k, v in encoder.state_dict().items()}
    out.update({f"network.{k}": v.detach().clone() for k, v in network.state_dict().items()})
    for name, head in network.sparse_heads.items():
        out[f"sparse.{name}.weight"] = head.weight.detach().clone()
        out[f"sparse.{name}.bias"] = head.bias.detach().clone()
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


def load_snapshot(encoder, network, w: dict) -> None:
    """Put a :func:`snapshot` ``w`` back into ``encoder`` and ``network``."""
    enc = {k[len("encoder."):]: v for k, v in w.items() if k.startswith("encoder.")}
    net = {k[len("network."):]: v for k, v in w.items() if k.startswith("network.")}
    encoder.load_state_dict(enc)
    network.load_state_dict(net)
    for name, head in network.sparse_heads.items():
        head.weight.copy_(w[f"sparse.{name}.weight"])
        head.bias.copy_(w[f"sparse.{name}.bias"])


def swa_update(swa: dict | None, cur: dict) -> dict:
    """The running mean ``{"n", "arrays"}`` after one more snapshot ``cur``: a new one from ``cur`` when ``swa`` is
    None, otherwise ``swa`` itself, updated in place."""
    if swa is None:
        return {"n": 1, "arrays": cur}
    swa["n"] += 1
    beta = 1.0 / swa["n"]
    with torch.no_grad():
        for k, v in cur.items():
            if v.is_floating_point():
                swa["arrays"][k].mul_(1.0 - beta).add_(v, alpha=beta)
    return swa
