"""The training rows a model remembers for ``learn``: a bounded, seeded sample of its training documents'
features and labels.

A label learned from three documents needs negatives: without them its ranker sees positives only and says
yes to every text that reaches its cluster (:mod:`xmtc.linear.update`, point 4). The old documents are not at
hand when a user learns, so the model keeps a uniform sample of its training rows, at most ``rows`` of them
(every row of a training set that small), and each learn offers its new documents to the sample as a
reservoir does (Vitter's algorithm R): after ``n`` documents seen in all, each of them is in the sample with
probability ``rows / n``, so later learns see earlier learned documents as negatives too.

What it costs is the sample's sparse rows, ``rows * (features per row + labels per row) * 12`` bytes saved
(float32 values, int64 indices), fixed however many documents the model is trained on: on yso-finna-en (TF-IDF
of titles, 2.45 labels a title) 50,000 rows take 14.8 MB on disk, the same per million documents as for a
hundred thousand (the model's two trees take 516 MB each).

Where the model was trained on texts, each remembered row keeps its text too, cut to :data:`TEXT_CHARS`
characters: the few-shot stage scores labels learned from a few documents by character n-grams
(:mod:`xmtc.models.few_shot_chars`), and needs the remembered rows' texts as its negatives. On yso-finna-en's
titles that is ~3 MB per 50,000 rows, at most ``rows * TEXT_CHARS`` characters for long texts; a model trained on
given features (no texts) remembers none, and a learn of feature rows drops them (the stage then scores by words).
A model folder thus holds up to ``rows`` training texts verbatim: ``memory_rows=0`` keeps none.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import ModelFormatError

STAGE = "training-memory"
TEXT_CHARS = 1000  # characters of a remembered row's text kept (module doc)


class TrainingMemory:
    """A reservoir sample of training rows: features ``X`` (csr), labels ``Y`` (csr over the model's labels),
    the documents ``seen`` so far and the RNG ``state`` that continues the sampling."""

    def __init__(self, X: sp.csr_matrix, Y: sp.csr_matrix, seen: int, capacity: int, seed: int, draws: int = 0,
                 texts: list[str] | None = None):
        self.X = sp.csr_matrix(X, dtype=np.float32)
        self.Y = sp.csr_matrix(Y, dtype=np.float32)
        self.seen = int(seen)
        self.capacity = int(capacity)
        self.seed = int(seed)
        self.draws = int(draws)  # reservoir draws made so far: the next learn's random stream starts after them
        # each row's text, cut to TEXT_CHARS (None: the rows came without texts)
        self.texts = None if texts is None else [t[:TEXT_CHARS] for t in texts]
        if self.texts is not None and len(self.texts) != self.X.shape[0]:
            raise ValueError(f"{len(self.texts)} texts for {self.X.shape[0]} remembered rows")
        self._char_cache = None  # (featurizer, its rows of the texts): char_rows, kept up to date by offer

    def char_rows(self, featurizer) -> sp.csr_matrix:
        """The texts' rows by a character featurizer (:mod:`xmtc.models.few_shot_chars`), computed once
        per featurizer and then carried through :meth:`offer` (a learn of one record reads one text, not all)."""
        if self.texts is None:
            raise ValueError("the remembered rows have no texts")
        if self._char_cache is None or self._char_cache[0] is not featurizer:
            self._char_cache = (featurizer, featurizer.transform(self.texts))  # the texts are cut already
        return self._char_cache[1]

    def with_rows(self, X: sp.csr_matrix) -> "TrainingMemory":
        """The same memory over other feature rows of the same documents (a grown vocabulary's, widened): labels,
        texts, counts and the texts' character rows carry over."""
        out = TrainingMemory(X, self.Y, self.seen, self.capacity, self.seed, self.draws, texts=self.texts)
        out._char_cache = self._char_cache
        return out

    @classmethod
    def sample(cls, X: sp.csr_matrix, Y: sp.csr_matrix, capacity: int, seed: int = 0,
               texts: list[str] | None = None) -> "TrainingMemory":
        """A uniform sample of ``min(capacity, n)`` rows of ``(X, Y)`` (and of their ``texts``), in their order."""
        n = X.shape[0]
        if n <= capacity:
            rows = np.arange(n)
        else:
            rows = np.sort(np.random.default_rng(seed).choice(n, size=capacity, replace=False))
        return cls(X[rows], Y[rows], n, capacity, seed, texts=None if texts is None else [texts[i] for i in rows])

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def offer(self, X: sp.csr_matrix, Y: sp.csr_matrix, texts: list[str] | None = None) -> None:
        """Take in new rows as a reservoir sample (module doc); ``Y`` may have more label columns (new labels).
        Rows offered without ``texts`` make the memory drop its texts (they would no longer match its rows)."""
        n_new = X.shape[0]
        Y_old = self.Y.copy()
        Y_old.resize(Y_old.shape[0], max(Y_old.shape[1], Y.shape[1]))
        Xs, Ys = self.X, Y_old
        rng = np.random.default_rng([self.seed, self.draws])
        self.draws += 1
        free = max(self.capacity - len(self), 0)
        take = np.arange(min(free, n_new))
        slots = np.arange(len(self), len(self) + take.size)
        # rows past the free room: row number m (1-based, of all seen) replaces a random slot with p = capacity/m
        rest = np.arange(take.size, n_new)
        m = self.seen + rest + 1
        j = np.floor(rng.random(rest.size) * m).astype(np.int64)
        hit = j < self.capacity
        keep_rows, keep_slots = np.r_[take, rest[hit]], np.r_[slots, j[hit]]
        Y_new = sp.csr_matrix(Y, dtype=np.float32)
        Y_new.resize(Y_new.shape[0], Ys.shape[1])
        if keep_rows.size:
            size = max(len(self), int(keep_slots.max()) + 1)
            # the last row offered for a slot wins, as in the sequential algorithm
            last = {int(s): int(r) for s, r in zip(keep_slots, keep_rows)}
            source = np.arange(size)
            from_new = np.zeros(size, dtype=bool)
            for s, r in last.items():
                source[s], from_new[s] = r, True
            stacked_X = sp.vstack([Xs, sp.csr_matrix(X, dtype=np.float32)], format="csr")
            stacked_Y = sp.vstack([Ys, Y_new], format="csr")
            pick = np.where(from_new, len(self) + source, source)
            Xs, Ys = stacked_X[pick], stacked_Y[pick]
            if self.texts is not None and texts is not None:
                cut = [t[:TEXT_CHARS] for t in texts]
                pool = self.texts + cut
                self.texts = [pool[i] for i in pick]
                if self._char_cache is not None:  # the rows of the new texts that stay, not of all offered
                    f, rows = self._char_cache
                    n_old = rows.shape[0]
                    stay = np.unique(pick[pick >= n_old]) - n_old
                    at = np.arange(n_old + n_new)  # a stacked row's place among the old rows and the staying ones
                    at[n_old + stay] = n_old + np.arange(stay.size)
                    self._char_cache = (f, sp.vstack([rows, f.transform([cut[i] for i in stay.tolist()])],
                                                     format="csr")[at[pick]])
        if texts is None and n_new:
            self.texts, self._char_cache = None, None
        self.X, self.Y = sp.csr_matrix(Xs), sp.csr_matrix(Ys)
        self.seen += n_new

    # -- storage ---------------------------------------------------------------------------------------
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {}
        for name, M in (("X", self.X), ("Y", self.Y)):
            arrays.update({f"{name}.data": M.data, f"{name}.indices": M.indices.astype(np.int64),
                           f"{name}.indptr": M.indptr.astype(np.int64),
                           f"{name}.shape": np.array(M.shape, dtype=np.int64)})
        if self.texts is not None:  # UTF-8 bytes and each text's end
            encoded = [t.encode("utf-8", "surrogatepass") for t in self.texts]
            arrays["texts.blob"] = np.frombuffer(b"".join(encoded), np.uint8).copy()
            arrays["texts.ends"] = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), dtype=np.int64)
        return {"seen": self.seen, "capacity": self.capacity, "seed": self.seed, "draws": self.draws}, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict, n_features: int, n_labels: int, where: str
                    ) -> "TrainingMemory":
        try:
            X, Y = (sp.csr_matrix((arrays[f"{k}.data"], arrays[f"{k}.indices"], arrays[f"{k}.indptr"]),
                                  shape=tuple(int(v) for v in arrays[f"{k}.shape"])) for k in ("X", "Y"))
            texts = None
            if "texts.ends" in arrays:
                blob, ends = bytes(arrays["texts.blob"]), np.asarray(arrays["texts.ends"], np.int64)
                if ends.size and (np.any(np.diff(ends) < 0) or ends[0] < 0 or ends[-1] != len(blob)):
                    raise ValueError("the texts' ends do not fit their bytes")
                starts = np.r_[0, ends[:-1]]
                texts = [blob[a:b].decode("utf-8", "surrogatepass") for a, b in zip(starts, ends)]
            mem = cls(X, Y, int(params["seen"]), int(params["capacity"]), int(params["seed"]), int(params["draws"]),
                      texts=texts)
        except (KeyError, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise ModelFormatError(f"{where}: invalid training memory ({exc})") from None
        if mem.X.shape[0] != mem.Y.shape[0] or mem.X.shape[1] != n_features or mem.Y.shape[1] > n_labels \
                or len(mem) > max(mem.capacity, 0) or mem.seen < len(mem):
            raise ModelFormatError(f"{where}: the training memory does not match the model's features and labels")
        return mem
