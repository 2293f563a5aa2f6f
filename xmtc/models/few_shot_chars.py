"""The few-shot stage's character n-gram scorer: a label learned from a few documents scored by the cosine of a
text to its documents' centroid, over character 3-5-grams.

**Why.** The stage's first scorer (:mod:`xmtc.models.few_shot`) fits a linear ranker on the model's own word
features. From three titles it learns their words, and a text that carries the label in other words, another
inflection or another language (yso-finna-en's "English" titles are often German, Swedish or Finnish) shares
none of them: on yso-finna-en-2k-20k's open case, seeds 3 and 4, 12.5% and 19.5% of such texts had the learned
label in their top 10. Character n-grams inside word boundaries see "railway" in "Eisenbahnen" no better, but
"railways" in "railway", "rautatie" in "rautateiden" and a shared stem across languages' compounds: the label
text route reads label names the same way (:mod:`xmtc.features.char_ngrams`). With the centroid in place of
the word ranker the same cases found 25.0% and 41.5% (five seeds: 22.4% -> 34.1% of the carriers,
benchmarks/RESULTS.md "The few-shot stage over character n-grams").

**What.** For label ``j`` with documents ``d_1 .. d_k`` (L2-normalised character TF-IDF rows ``x_i``, of each
text's first :data:`~xmtc.models.memory.TEXT_CHARS` characters) the decision value of a text ``x`` is

    s_j(x) = x . c_j,   c_j = (1/k) sum_i x_i                  (the mean cosine to the label's documents)

its leave-one-out value for ``d_i`` is ``x_i . (1/(k-1)) sum_{l != i} x_l`` (how a new document of the label
scores against the others), and every remembered row without the label is a negative scored by ``c_j``: it was
no part of the centroid, so its value is out of sample as it stands (no cross-fitting, unlike the ranker's).
The probability is the stage's ``p_j(s)`` on these values (:func:`xmtc.models.few_shot.probability`), so
the scores mean P(correct) as every calibrated score in xmtc does: measured on five draws, the learned labels'
suggestions scored 4.47% on average and were right 4.87% of the time (1,582 suggestions).

**The limit, measured.** A centroid weighs n-grams by idf, not against the negatives: three documents that all
name Helsinki teach Helsinki too (the learn guide's *railways*: "The Roma and Helsinki" 0.43). The word
ranker's fit on the same character rows takes half the slots and drops that case, but found 28.9% of the
carriers against 34.1% and failed the bar on one draw of five (benchmarks/RESULTS.md): the centroid stays.

**The featurizer** is fitted at the first learn that needs it, on the documents of the labels that join the
stage (not on every text of the learn: a fifth of yso-finna-en learned at once brings 104,507 titles, and
fitting on them all took 18 s) and a seeded draw of the remembered texts up to :data:`FIT_CHARS` characters
(~5,700 titles, ~700 Reuters stories), and kept with the stage: later learns and predictions read texts with
the same n-grams and idf (an n-gram it never saw is left out, as the TF-IDF does with words).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..features.char_ngrams import CharNgramFeaturizer
from .memory import TEXT_CHARS

FIT_CHARS = 400_000  # characters of remembered texts the character featurizer is fitted on, at most (module doc)


def fitted_featurizer(memory_texts: list[str], new_texts: list[str], seed: int) -> CharNgramFeaturizer:
    """The stage's character featurizer (module doc): fitted on the new texts and remembered ones, in a seeded
    random order, up to :data:`FIT_CHARS` characters of them (each cut to
    :data:`~xmtc.models.memory.TEXT_CHARS`)."""
    cut = [t[:TEXT_CHARS] for t in memory_texts]
    order = np.random.default_rng(seed).permutation(len(cut))
    ends = np.cumsum(np.fromiter((len(cut[i]) for i in order), np.int64, len(cut)))
    take = order[:int(np.searchsorted(ends, FIT_CHARS, side="left")) + 1]  # through the text that reaches it
    return CharNgramFeaturizer().fit([cut[i] for i in np.sort(take)] + [t[:TEXT_CHARS] for t in new_texts])


def char_rows(featurizer: CharNgramFeaturizer, texts: list[str]) -> sp.csr_matrix:
    """The L2-normalised character rows of ``texts``' first :data:`~xmtc.models.memory.TEXT_CHARS` characters."""
    return featurizer.transform([t[:TEXT_CHARS] for t in texts])


def centroids(pos: list[sp.csr_matrix], negatives: sp.csr_matrix, few: int
              ) -> tuple[sp.csc_matrix, np.ndarray, list[np.ndarray]]:
    """Per label (its documents' rows ``pos[t]``, at least two): the centroid column ``c_j`` (module doc), its
    leave-one-out values (``few`` wide, ``-inf`` padded) and every negative's value ``negatives . c_j``.
    Returns ``(C, loo, values)``: ``C`` (features + 1, labels) with a zero bias row, as the stage's weights."""
    d = negatives.shape[1]
    cols, loo = [], np.full((len(pos), few), -np.inf, dtype=np.float32)
    for t, P in enumerate(pos):
        P = sp.csr_matrix(P, dtype=np.float64)
        k = P.shape[0]
        G = (P @ P.T).toarray()
        loo[t, :k] = (G.sum(axis=1) - np.diag(G)) / (k - 1)
        cols.append(sp.csr_matrix(P.sum(axis=0) / k).T)
    C = sp.hstack(cols, format="csc") if cols else sp.csc_matrix((d, 0))
    V = (sp.csr_matrix(negatives, dtype=np.float64) @ C).toarray() if negatives.shape[0] and cols else \
        np.zeros((negatives.shape[0], len(cols)))  # every negative against every centroid: one product
    values = [V[:, t] for t in range(len(cols))]
    C = sp.vstack([C, sp.csr_matrix((1, C.shape[1]))], format="csc").astype(np.float32)
    return C, loo, values
