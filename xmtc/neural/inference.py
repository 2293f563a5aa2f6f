"""Eval-mode passes of an end-to-end model over tokenized texts: top-k predictions and text representations.

An end-to-end method is an encoder plus a :class:`~xmtc.neural.network.Network`. Outside its training
step the pair is read in three ways, all here: the top-k labels of texts (prediction, and the validation
that picks the kept epoch in :mod:`xmtc.neural.training_loop`, scored by :func:`precision_at`), the
network's text representations (what ``head_init="centroid"`` and the re-ranker start from), and one
batch's representation with every dropout as set (benchmarks that look at what a training step sees).

Every pass sorts the texts by length (less padding per batch), runs the encoder and the network in eval
mode under inference mode and autocast, and writes each batch's rows back in input order. Separate from
the training loop because prediction and the model shell need these without a trainer.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..features.encoder import Tokenized, autocast


def represent(encoder, network, batch):
    """The network's text representation of one tokenized batch (no gradient bookkeeping here)."""
    out = encoder(**batch, output_hidden_states=True)
    return network.text_representation(out.hidden_states, batch["attention_mask"])


def eval_batches(encoder, network, tokenized: Tokenized, batch_size: int, device, precision: str,
                  progress: bool, desc: str):
    """Yield ``(positions, rep)`` over ``tokenized`` in length-sorted batches, encoder and network in
    eval mode under inference mode (their training flags are restored afterwards)."""

    from ..progress import progress_bar

    n = len(tokenized)
    order = np.argsort(tokenized.lengths, kind="stable")
    was = encoder.training, network.training
    encoder.eval()
    network.eval()
    try:
        with torch.inference_mode(), progress_bar(progress, total=n, desc=desc, unit="text", leave=False) as bar:
            for s in range(0, n, batch_size):
                pos = order[s:s + batch_size]
                with autocast(device, precision):
                    yield pos, represent(encoder, network, tokenized.batch(pos, device))
                bar.update(pos.size)
    finally:
        encoder.train(was[0])
        network.train(was[1])


def predict_topk(encoder, network, tokenized: Tokenized, k: int, *, batch_size: int = 128, device="cpu",
                 precision: str = "auto", progress: bool = False, with_representations: bool = False):
    """Top-k label ids (int32, -1 padded) and scores (float32) of every tokenized text, in input order;
    ``with_representations`` adds the texts' representations as :func:`representations` gives them
    (from the same encoder pass)."""

    n = len(tokenized)
    idx = np.full((n, k), -1, dtype=np.int32)
    scores = np.zeros((n, k), dtype=np.float32)
    reps = None
    for pos, rep in eval_batches(encoder, network, tokenized, batch_size, device, precision, progress, "predict"):
        i, sc = network.predict(rep, k)
        kk = min(k, i.shape[1])
        idx[pos, :kk] = i[:, :kk].cpu().numpy().astype(np.int32)
        scores[pos, :kk] = sc[:, :kk].float().cpu().numpy()
        if with_representations:
            reps = _put_rows(reps, n, pos, rep)
    scores[idx < 0] = 0.0
    if with_representations:
        return idx, scores, reps if reps is not None else np.zeros((0, 0), dtype=np.float32)
    return idx, scores


def _put_rows(out: np.ndarray | None, n: int, pos, rep) -> np.ndarray:
    """Write a batch's representation into rows ``pos`` of ``out`` (made (n, d) float32 on the first batch);
    a per-level list goes side by side, level 0 first."""
    if isinstance(rep, (list, tuple)):
        rep = torch.cat(list(rep), dim=1)
    rep = rep.float().cpu().numpy()
    if out is None:
        out = np.zeros((n, rep.shape[1]), dtype=np.float32)
    out[pos] = rep
    return out


def representations(encoder, network, tokenized: Tokenized, *, batch_size: int = 128, device="cpu",
                    precision: str = "auto", progress: bool = False) -> np.ndarray:
    """(n, d) float32: the network's text representation of every tokenized text (eval mode, so no
    dropout), in input order -- what a data-driven head initialisation starts from. A network with one
    representation per level (CascadeXML's list) gets them side by side, level 0 first."""

    out = None
    for pos, rep in eval_batches(encoder, network, tokenized, batch_size, device, precision, progress,
                                  "represent"):
        out = _put_rows(out, len(tokenized), pos, rep)
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def precision_at(idx: np.ndarray, Y: sp.csr_matrix, k: int) -> float:
    """P@k in percent of top-k predictions ``idx`` against the label matrix ``Y``."""
    Y = sp.csr_matrix(Y)
    top = idx[:, :k]
    rows = np.repeat(np.arange(top.shape[0]), top.shape[1])
    cols = top.reshape(-1)
    ok = cols >= 0
    hits = np.asarray(Y[rows[ok], cols[ok]]).reshape(-1)
    return 100.0 * float(hits.sum()) / (top.shape[0] * k)
