"""A small mutation harness for the samplers, scores and losses of xmtc/neural/ and xmtc/linear/, and for the
open-world parts (labels without documents; labels added, removed or learned after training).

Why not mutmut: it rewrites the source files in place (version 2) and needs its own project layout; this
working tree is shared with other engineers, so nothing here may touch /work/main/xmtc. Instead:

* the package, the tests and pyproject.toml are copied into a temporary directory (``--workdir``); the
  shared data is linked beside the copy so the tests find it where conftest looks;
* mutants are generated from the AST of the *targeted functions only* (``TARGETS``), with these operators:
  ``cmp`` (``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``), ``binop`` (``+`` <-> ``-``, ``*`` <-> ``/``,
  ``&`` <-> ``|``), ``drop`` (``a + b`` / ``a - b`` -> ``a``: a dropped term), ``off1`` (a small integer
  constant n -> n + 1), ``neg`` (``-x`` -> ``x``) and ``random`` (a top-k / argpartition / argsort replaced
  by a random choice of the same shape: the "hard negatives -> random negatives" bug);
* the open-world targets (a fourth element ``OPEN_OPS`` in ``TARGETS``) also get: ``dropf`` (``a * b`` /
  ``a / b`` -> ``a``: a dropped factor or divisor, e.g. a temperature), ``aug`` (``x += y`` <-> ``x -= y``,
  ``*=`` <-> ``/=``, ``&=`` <-> ``|=``), ``augdrop`` (an augmented assignment dropped: ``e[rows] += w`` ->
  nothing), ``not`` (``~x`` / ``not x`` -> ``x``: the complement of a set of labels), ``index`` (``a[b]`` ->
  ``b``: positions used where ids were meant), ``arange0`` (``np.arange(a, b)`` -> ``np.arange(b - a)``: ids
  counted from 0 instead of from ``a``), ``cmpx`` (``is`` <-> ``is not``, ``in`` <-> ``not in``) and
  ``boolop`` (``and`` <-> ``or``); no mutants there in log lines, f-strings, the messages of raised errors or
  default values, and no ``neg`` of ``dim=-1`` / ``axis=-1``;
* each mutant is written over its file in the copy, the target's test selection runs with the copy first
  on the path (cwd and PYTHONPATH), bounded by ``--timeout``, and the file is restored from the original;
* a mutant is *killed* when the tests fail (or time out), *survived* when they pass; a mutant whose
  source equals the original after ``ast.unparse`` is not generated.

At most ``--max`` mutants (default 60) are run: every ``random`` site and every site ``--must`` names, the rest
sampled per target with a fixed seed. Results go to ``--out`` (JSON lines) and a summary table to stdout.

    python scripts/mutate.py --max 60 --timeout 300 --out /tmp/mutants.jsonl
    python scripts/mutate.py --list                      # the sites, nothing run
    python scripts/mutate.py --only update.py --funcs _refit,_scaled --max 1000   # some functions of a target
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

OPEN_OPS = ("dropf", "aug", "augdrop", "not", "index", "arange0", "cmpx", "boolop")

# learn growing the TF-IDF vocabulary: the tests of extended (tfidf_growth.py), its trie (ngram_trie.py), its record
# (rare_ngrams.py)
_VOCAB_TFIDF_TESTS = ["tests/test_tfidf.py", "tests/test_vocab_growth_mutants.py", "-k",
                      "(test_tfidf.py and (grown or rare)) or pin_vocab_tfidf"]

# (file, functions ("Class.method" or "function"), pytest arguments: the fast hand-made tests of the file[,
# extra operators])
TARGETS = [
    ("xmtc/methods/lightxml/network.py", ["sample_clusters", "candidate_labels", "cluster_targets", "masked_bce",
                                          "LightXMLNetwork.training_loss"],
     ["tests/test_lightxml.py", "-k", "cluster_members or dynamic_negative or prediction_is_sigmoid"
                                      " or training_step_feeds or appended_once"]),
    ("xmtc/methods/elias/network.py", ["ELIASNetwork.cluster_scores", "ELIASNetwork.edge_weights",
                                       "ELIASNetwork._refresh_parent", "ELIASNetwork.cluster_shortlist",
                                       "ELIASNetwork.paths", "_dedup_max", "ELIASNetwork._top_paths"],
     ["tests/test_elias.py", "-k", "adjacency or formulas or training_loss or parent or touches or training_beam"
                                   " or training_shortlist or approx_initialisation"]),
    ("xmtc/methods/elias/loss.py", ["elias_loss"],
     ["tests/test_elias.py", "-k", "adjacency or formulas or training_loss or parent or touches or training_beam"
                                   " or training_shortlist or approx_initialisation"]),
    ("xmtc/methods/cascadexml/network.py", ["CascadeNetwork.candidates", "CascadeNetwork.training_loss"],
     ["tests/test_cascadexml.py", "-k", "candidates or prediction_combines or training_step_feeds"
                                        " or nearest_centroid"]),
    ("xmtc/methods/aplc/network.py", ["APLCNetwork.batch_targets"],
     ["tests/test_aplc.py", "-k", "frequency_split or hand or loss_equals or only_the_tail or prior_biases"
                                  " or log1mexp or pruned or narrow_beam or training_step_scores"]),
    ("xmtc/methods/aplc/loss.py", ["aplc_loss", "log1mexp"],
     ["tests/test_aplc.py", "-k", "frequency_split or hand or loss_equals or only_the_tail or prior_biases"
                                  " or log1mexp or pruned or narrow_beam or training_step_scores"]),
    ("xmtc/neural/shortlist.py", ["topk_mask", "parent_mask", "build_shortlist"],
     ["tests/test_transformer.py", "-k", "shortlist_equals or bootstrap or level_trainer_step or padded_with_id"]),
    ("xmtc/methods/xr_transformer/bootstrap.py", ["bootstrap_linear"],
     ["tests/test_transformer.py", "-k", "bootstrap"]),
    ("xmtc/neural/losses.py", ["shortlist_loss"],
     ["tests/test_transformer.py", "-k", "shortlist_equals or level_trainer_step or padded_with_id or shortlist_loss_is"]),
    ("xmtc/neural/alc.py", ["log1mexp", "hardest_negative", "batch_aware_candidates", "pair_ce", "tcm_loss",
                            "alc_terms", "warmup_weight", "relative_clip", "batch_union", "with_alc"],
     ["tests/test_alc.py", "tests/test_open_world_mutants.py", "tests/test_route_alc_pins.py", "-k",
      "(test_alc.py and not cli_flags and not benchmark) or pin_alc"], OPEN_OPS),
    ("xmtc/linear/negatives.py", ["beam_mask", "active_mask"],
     ["tests/test_hierarchy.py", "-k", "level_targets or masks"]),
    ("xmtc/linear/solver.py", ["primal_objective"],
     ["tests/test_solver.py", "-k", "by_hand or synthetic"]),
    ("xmtc/linear/beam.py", ["topk_to_csr", "root_beam"],
     ["tests/test_beam.py"]),
    # -- the open world: labels without documents, labels added / removed / learned after training ------------
    # (the new tests of tests/test_open_world_mutants.py are picked by the ``pin_<area>`` in their names)
    ("xmtc/methods/dual_encoder/network.py", ["normalize_rows", "DualEncoderNetwork.__init__",
                                              "DualEncoderNetwork.label_vectors", "DualEncoderNetwork.add_labels",
                                              "DualEncoderNetwork._pool_vectors", "DualEncoderNetwork.pool",
                                              "DualEncoderNetwork.training_loss", "DualEncoderNetwork.predict"],
     ["tests/test_dual_encoder.py", "tests/test_open_world_mutants.py", "-k",
      "(test_dual_encoder.py and (free_vectors or a_step_scores or labels_without_documents)) or pin_dual"], OPEN_OPS),
    ("xmtc/methods/dual_encoder/estimator.py", ["label_texts", "DualEncoder.fit", "DualEncoder._build_network",
                                                "DualEncoder.add_labels"],
     ["tests/test_dual_encoder.py", "tests/test_label_files.py", "tests/test_open_world_mutants.py", "-k",
      "(test_dual_encoder.py and (free_vectors or a_step_scores or labels_without_documents)) or"
      " (test_label_files.py and dual_encoder_adds) or pin_dual"], OPEN_OPS),
    ("xmtc/methods/knn/estimator.py", ["pefa_scores", "KNN.fit", "KNN.scores", "KNN.add_labels"],
     ["tests/test_label_text.py", "tests/test_open_world_mutants.py", "-k",
      "(test_label_text.py and (pefa or knn_needs)) or pin_knn"], OPEN_OPS),
    ("xmtc/methods/label_text/estimator.py", ["resolve_label_texts", "fit_text_inputs", "new_label_texts",
                                              "finite_topk", "LabelText.fit", "LabelText._predict_batch",
                                              "LabelText.label_scores", "LabelText.add_labels"],
     ["tests/test_label_text.py", "tests/test_open_world_mutants.py", "tests/test_route_alc_pins.py", "-k",
      "(test_label_text.py and (tfidf or without_documents or command_line or labels_added or label_texts_are"
      " or encoder_scorer)) or pin_label_text"], OPEN_OPS),
    ("xmtc/models/label_route.py", ["reusing_route_topk", "_top_cosines", "merge_topk", "LabelRoute.fit",
                                    "LabelRoute.add", "LabelRoute.remove", "LabelRoute.prior_ratio",
                                    "LabelRoute.map_odds", "LabelRoute.probabilities", "LabelRoute.topk",
                                    "LabelRoute._topk", "LabelRoute.merge"],
     ["tests/test_open_labels.py", "tests/test_evaluate_once.py", "tests/test_open_world_mutants.py", "tests/test_route_alc_pins.py",
      "-k",
      "(test_open_labels.py and not serve) or (test_evaluate_once.py and reuses) or pin_route"], OPEN_OPS),
    ("xmtc/models/route_kernels.py", ["inverted", "top_rows"],
     ["tests/test_route_top_rows.py", "tests/test_open_world_mutants.py", "-k",
      "test_route_top_rows.py or pin_kernels"], OPEN_OPS),
    ("xmtc/models/route_prior.py", ["unseen_mass", "prior_ratio"],
     ["tests/test_open_labels.py", "tests/test_open_world_mutants.py", "-k",
      "(test_open_labels.py and (route_map or unseen_mass or prior)) or pin_prior"], OPEN_OPS),
    ("xmtc/models/open_labels.py", ["attach_route", "apply_open_labels", "add_labels", "_texts_or_names",
                                    "_updated_vocab", "_default_texts", "_grown_vocab", "_grow_label_arrays",
                                    "remove_labels"],
     ["tests/test_open_labels.py", "tests/test_label_text.py", "tests/test_explain.py", "tests/test_label_files.py",
      "tests/test_open_world_mutants.py", "-k",
      "(test_open_labels.py and (label_file_labels or labels_add_then_remove or without_text_is_routed)) or"
      " (test_label_text.py and labels_added_after) or (test_explain.py and (removed_labels or added_after_training)) or"
      " (test_label_files.py and (labels_add_takes or keeps_what_the_file or label_changes or native_label_texts))"
      " or pin_open_labels"],
     OPEN_OPS),
    ("xmtc/models/learning.py", ["learn_tree_model", "_few_shot_after", "_follow_labels", "docs_before",
                                 "carry_calibration", "_new_labels", "grown_vocabulary", "_widened_memory",
                                 "_widened_stage", "_follow_vocabulary"],
     ["tests/test_learn.py", "tests/test_learn_memory.py", "tests/test_open_world_mutants.py",
      "tests/test_vocab_growth_mutants.py", "-k",
      "(test_learn.py and (new_label or held_out or replay or band or calibration or new_words)) or"
      " (test_learn_memory.py and (three_documents or whole_memory or remove_then_learn or added_by_text))"
      " or pin_learning or pin_vocab_learning"], OPEN_OPS),
    ("xmtc/models/memory.py", ["TrainingMemory.sample", "TrainingMemory.offer", "TrainingMemory.char_rows",
                               "TrainingMemory.to_arrays", "TrainingMemory.from_arrays", "TrainingMemory.with_rows"],
     ["tests/test_learn_memory.py", "tests/test_open_world_mutants.py", "tests/test_few_shot_chars.py", "tests/test_update_memory_pins.py",
      "-k",
      "(test_learn_memory.py and (remembered or sample or reservoir or free_room or whole_memory)) or pin_memory"
      " or test_few_shot_chars.py"],
     OPEN_OPS),
    ("xmtc/linear/update.py", ["place_new_labels", "extended_tree", "changed_nodes", "fresh_columns", "update",
                               "_training_rows", "_refit", "_refit_sampled", "_scaled", "old_curvature", "_fit_fresh", "_never", "_zeroed",
                               "widened_rows"],
     ["tests/test_learn.py", "tests/test_learn_memory.py", "tests/test_open_world_mutants.py",
      "tests/test_vocab_growth_mutants.py", "tests/test_update_memory_pins.py", "-k",
      "(test_learn.py and (proximal or dual_warm or unknown_warm or keep_their_weights or changed_nodes or new_label"
      " or held_out or replay)) or (test_learn_memory.py and (fresh_columns or three_documents or whole_memory"
      " or few_documents or added_by_text or bias_anchor or curvature)) or (test_learn.py and (widened or new_words))"
      " or pin_update or pin_vocab_update"], OPEN_OPS),
    # -- learn growing the TF-IDF vocabulary (dd67dc2); new tests in tests/test_vocab_growth_mutants.py ----------
    ("xmtc/features/tfidf_growth.py", ["extended", "_copy_vocabulary"], _VOCAB_TFIDF_TESTS, OPEN_OPS),
    ("xmtc/features/tfidf.py", ["TfidfFeaturizer._df_bounds", "TfidfFeaturizer._idf"], _VOCAB_TFIDF_TESTS, OPEN_OPS),
    ("xmtc/features/rare_ngrams.py", ["_unigram_hashes", "_mix", "_node_hashes", "trie_hashes", "feature_hashes",
                                      "_rare_record", "_counts_of", "_rare_merged", "counted_on"],
     _VOCAB_TFIDF_TESTS, OPEN_OPS),
    ("xmtc/features/ngram_trie.py", ["node_map", "lacking", "appended"],
     _VOCAB_TFIDF_TESTS, OPEN_OPS),
    # -- learn's in-place edit of the beam layout (637b4d8): the Python wrappers (the C kernels are not mutated) --
    ("xmtc/linear/beam_edit.py", ["grown", "_moved", "widened", "_places", "_layout_args", "node_columns", "merged",
                                  "replaced", "_edited"],
     ["tests/test_beam_edit.py", "tests/test_learn.py", "tests/test_learn_memory.py", "tests/test_vocab_growth_mutants.py",
      "-k", "test_beam_edit.py or (test_learn.py and (keep_their_weights or new_label or replay or widened))"
      " or (test_learn_memory.py and (whole_memory or remove_then_learn)) or pin_vocab_update"], OPEN_OPS),
    ("xmtc/models/few_shot.py", ["FewShotRankers.updated", "FewShotRankers._update", "FewShotRankers._joining",
                                 "FewShotRankers._held",
                                 "FewShotRankers._fit", "FewShotRankers._fit_chars", "FewShotRankers._made",
                                 "FewShotRankers._subset", "FewShotRankers.topk", "FewShotRankers.merge",
                                 "FewShotRankers.evidence", "FewShotRankers.decision", "_carriers", "_stack",
                                 "merge_few_shot"],
     ["tests/test_few_shot.py", "tests/test_few_shot_chars.py", "tests/test_few_shot_pins.py"], OPEN_OPS),
    ("xmtc/models/few_shot_scores.py", ["probability", "interpolation_points", "_stats", "_best_below", "_ratio",
                                        "negative_sketch", "_decision"],
     ["tests/test_few_shot.py", "tests/test_few_shot_chars.py", "tests/test_few_shot_pins.py"], OPEN_OPS),
    # -- the few-shot stage over character n-grams and the remembered texts it reads --------------------------
    # -- the character featurizer's fit counted in C, the isotonic maps' own PAV: their Python halves --
    ("xmtc/features/char_ngram_kernels.py", ["fit_vocabulary"], ["tests/test_char_ngrams.py"], OPEN_OPS),
    ("xmtc/features/char_ngrams.py", ["CharNgramFeaturizer.fit", "CharNgramFeaturizer._counted"],
     ["tests/test_char_ngrams.py"], OPEN_OPS),
    ("xmtc/models/calibration.py", ["pava", "isotonic_steps", "laplace_blocks"], ["tests/test_calibration.py"],
     OPEN_OPS),
    ("xmtc/models/few_shot_chars.py", ["fitted_featurizer", "char_rows", "centroids"],
     ["tests/test_few_shot_chars.py", "tests/test_few_shot.py", "tests/test_few_shot_pins.py"], OPEN_OPS),
    ("xmtc/models/few_shot_words.py", ["rankers"],
     ["tests/test_few_shot.py", "tests/test_few_shot_chars.py", "tests/test_few_shot_pins.py"], OPEN_OPS),
]

HELPERS = '''

def _mut_rtopk(t, k, dim=-1, *args, **kwargs):
    import torch
    idx = torch.topk(torch.rand(t.shape, device=t.device), k, dim=dim).indices
    return torch.return_types.topk((t.gather(dim, idx), idx))


def _mut_rperm(a, *args, axis=-1, **kwargs):
    import numpy
    return numpy.argsort(numpy.random.default_rng().random(numpy.shape(a)), axis=axis)
'''

CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_LOGGERS = ("log", "logger", "logging", "warnings")
CMPX = {ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.BitAnd: ast.BitOr,
       ast.BitOr: ast.BitAnd}


def _func_nodes(tree: ast.Module, names: list[str]):
    """The FunctionDef nodes named ``f`` or ``Class.f``."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            out.append(node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and f"{node.name}.{sub.name}" in names:
                    out.append(sub)
    return out


def _is_arange(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "arange" \
        and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy", "torch") \
        and len(node.args) == 2 and not node.keywords


def _index_site(node) -> bool:
    """``a[b]`` read with an index expression ``b`` (not a constant, a slice or a tuple of them)."""
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
        not isinstance(node.slice, (ast.Constant, ast.Slice, ast.Tuple)) and \
        not (isinstance(node.slice, ast.UnaryOp) and isinstance(node.slice.operand, ast.Constant))


def sites(tree: ast.Module, names: list[str], ops: tuple = ()) -> list[tuple]:
    """Every mutation site in the named functions: ``(op, lineno, col, detail)``; ``ops``: the extra
    operators (``OPEN_OPS``) besides the basic ones."""
    found = []
    for fn in _func_nodes(tree, names):
        # annotations are never evaluated (``from __future__ import annotations``): no mutants there
        skip = set()
        for node in ast.walk(fn):
            for ann in ([node.annotation] if isinstance(node, (ast.arg, ast.AnnAssign)) and node.annotation else []) \
                    + ([node.returns] if isinstance(node, ast.FunctionDef) and node.returns else []):
                skip.update(id(x) for x in ast.walk(ann))
            # ... nor in a signature's default values (every caller in the tests passes its own)
            if ops and isinstance(node, ast.arguments):
                skip.update(id(x) for d in node.defaults + [k for k in node.kw_defaults if k] for x in ast.walk(d))
            # the open-world targets: no mutants in what only people read (log lines, f-strings, raised messages)
            if ops and (isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Raise) and node.exc is not None)
                        or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                            and isinstance(node.func.value, ast.Name) and node.func.value.id in _LOGGERS)):
                skip.update(id(x) for x in ast.walk(node))
        # open-world targets: no ``neg`` of ``dim=-1`` / ``axis=-1`` (on the 2-D arrays there, -1 and 1 are one axis)
        axis_kw = {id(k.value) for node in ast.walk(fn) if ops and isinstance(node, ast.Call) for k in node.keywords
                   if k.arg in ("dim", "axis")}
        for node in ast.walk(fn):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Compare):
                for i, op in enumerate(node.ops):
                    if type(op) in CMP:
                        found.append(("cmp", node.lineno, node.col_offset, i))
            elif isinstance(node, ast.BinOp):
                if type(node.op) in BIN:
                    found.append(("binop", node.lineno, node.col_offset, type(node.op).__name__))
                if isinstance(node.op, (ast.Add, ast.Sub)):
                    found.append(("drop", node.lineno, node.col_offset, type(node.op).__name__))
            elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 3:
                found.append(("off1", node.lineno, node.col_offset, node.value))
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
                if id(node) not in axis_kw:
                    found.append(("neg", node.lineno, node.col_offset, None))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("topk", "argpartition", "argsort") and \
                    not (ops and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                # (open-world targets: ``self.topk(...)`` is a method of the class, e.g. LabelRoute.topk)
                found.append(("random", node.lineno, node.col_offset, node.func.attr))
            if not ops:
                continue
            end = getattr(node, "end_col_offset", None)
            if "dropf" in ops and isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
                found.append(("dropf", node.lineno, node.col_offset, f"{type(node.op).__name__}:{end}"))
            if isinstance(node, ast.AugAssign):
                if "aug" in ops and type(node.op) in BIN:
                    found.append(("aug", node.lineno, node.col_offset, type(node.op).__name__))
                if "augdrop" in ops:
                    found.append(("augdrop", node.lineno, node.col_offset, type(node.op).__name__))
            if "not" in ops and isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
                found.append(("not", node.lineno, node.col_offset, f"{type(node.op).__name__}:{end}"))
            if "index" in ops and _index_site(node):
                found.append(("index", node.lineno, node.col_offset, end))
            if "arange0" in ops and _is_arange(node):
                found.append(("arange0", node.lineno, node.col_offset, end))
            if "cmpx" in ops and isinstance(node, ast.Compare):
                for i, op in enumerate(node.ops):
                    if type(op) in CMPX:
                        found.append(("cmpx", node.lineno, node.col_offset, i))
            if "boolop" in ops and isinstance(node, ast.BoolOp):
                found.append(("boolop", node.lineno, node.col_offset, end))
    return sorted(set(found), key=lambda s: (s[1], s[2], s[0], str(s[3])))


class _Apply(ast.NodeTransformer):
    def __init__(self, site):
        self.op, self.line, self.col, self.detail = site
        self.done = False

    def _here(self, node) -> bool:
        return not self.done and getattr(node, "lineno", None) == self.line and \
            getattr(node, "col_offset", None) == self.col

    def _here_end(self, node) -> bool:
        """Here, for a site whose detail ends in the node's end column (nodes that start together)."""
        return self._here(node) and str(self.detail).rsplit(":", 1)[-1] == str(node.end_col_offset)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if self.op == "cmp" and self._here(node):
            node.ops[self.detail] = CMP[type(node.ops[self.detail])]()
            self.done = True
        elif self.op == "cmpx" and self._here(node):
            node.ops[self.detail] = CMPX[type(node.ops[self.detail])]()
            self.done = True
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if self._here(node) and type(node.op).__name__ == self.detail:
            if self.op == "aug":
                node.op = BIN[type(node.op)]()
                self.done = True
            elif self.op == "augdrop":
                self.done = True
                return ast.copy_location(ast.Pass(), node)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if self.op == "index" and self._here_end(node):
            self.done = True
            return node.slice
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if self.op == "boolop" and self._here_end(node):
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self.done = True
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if self.op == "dropf" and self._here_end(node) and \
                type(node.op).__name__ == str(self.detail).split(":")[0]:
            self.done = True
            return node.left
        if self._here(node) and type(node.op).__name__ == self.detail:
            if self.op == "binop":
                node.op = BIN[type(node.op)]()
                self.done = True
            elif self.op == "drop":
                self.done = True
                return node.left
        return node

    def visit_Constant(self, node):
        if self.op == "off1" and self._here(node) and type(node.value) is int:
            self.done = True
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if self.op == "neg" and self._here(node) and isinstance(node.op, ast.USub):
            self.done = True
            return node.operand
        if self.op == "not" and self._here_end(node) and isinstance(node.op, (ast.Invert, ast.Not)):
            self.done = True
            return node.operand
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if self.op == "arange0" and self._here_end(node) and _is_arange(node):
            self.done = True
            a, b = node.args
            node.args = [ast.BinOp(b, ast.Sub(), a)]
            return node
        if self.op == "random" and self._here(node):
            self.done = True
            attr = node.func.attr
            if attr == "topk":
                if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                    args = node.args                       # torch.topk(t, k, ...)
                else:
                    args = [node.func.value] + node.args   # t.topk(k, ...)
                return ast.copy_location(ast.Call(ast.Name("_mut_rtopk", ast.Load()), args, node.keywords), node)
            return ast.copy_location(ast.Call(ast.Name("_mut_rperm", ast.Load()), node.args, node.keywords), node)
        return node


def mutate_source(src: str, site) -> str | None:
    tree = ast.parse(src)
    t = _Apply(site)
    new = t.visit(copy.deepcopy(tree))
    if not t.done:
        return None
    ast.fix_missing_locations(new)
    out = ast.unparse(new)
    if out == ast.unparse(tree):
        return None
    return out + HELPERS


def describe(site, src_lines) -> str:
    op, line, col, detail = site
    code = src_lines[line - 1].strip()
    return f"{op}{'' if detail is None else ':' + str(detail)} @ line {line}:{col}: {code[:90]}"


def make_copy(workdir: Path) -> Path:
    main = workdir / "main"
    if main.exists():
        shutil.rmtree(main)
    main.mkdir(parents=True)
    shutil.copytree(ROOT / "xmtc", main / "xmtc", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", main / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", main / "pyproject.toml")
    shared = ROOT.parent / "shared"
    link = workdir / "shared"
    if shared.exists() and not link.exists():
        link.symlink_to(shared)
    return main


def run_tests(main: Path, args: list[str], timeout: int, first: bool = True, workers: str | None = None
              ) -> tuple[str, float, str]:
    """Run pytest on the copy: ``(passed | failed | timeout | errorN, seconds, last line [failed tests])``;
    ``first``: stop at the first failure; ``workers``: pytest-xdist's ``-n`` (None: pyproject's addopts)."""
    env = {**os.environ, "PYTHONPATH": str(main), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", *(["-x"] if first else []), "-p", "no:cacheprovider",
           *(["-n", workers] if workers is not None else []), *args]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=main, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0, ""
    lines = (r.stdout + r.stderr).strip().splitlines()
    failed = [ln.split()[1].split("::")[-1] for ln in lines if ln.startswith("FAILED ")]
    tail = (lines[-1:] or [""])[0] + (f" [{', '.join(failed)}]" if failed else "")
    status = {0: "passed", 1: "failed"}.get(r.returncode, f"error{r.returncode}")
    return status, time.time() - t0, tail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=60)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="run only targets whose file contains this text")
    ap.add_argument("--funcs", default=None,
                    help="comma-separated: mutate only these of the targets' functions (names as in TARGETS)")
    ap.add_argument("--workers", default=None, help="pytest-xdist's -n for every test run (default: pyproject's)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--rerun", default=None, help="JSON lines of an earlier run: run its survivors again")
    ap.add_argument("--must", action="append", default=[],
                    help="always run the sites whose description (as --list prints it) contains this text")
    a = ap.parse_args(argv)

    targets = [t for t in TARGETS if a.only is None or a.only in t[0]]
    per_target = []
    only_funcs = None if a.funcs is None else set(a.funcs.split(","))
    for path, names, test_args, *ops in targets:
        if only_funcs is not None:
            names = [f for f in names if f in only_funcs]
        src = (ROOT / path).read_text()
        s = [x for x in sites(ast.parse(src), names, tuple(ops[0]) if ops else ()) if mutate_source(src, x) is not None]
        per_target.append((path, src, s, test_args))
    if a.list:
        for path, src, s, _ in per_target:
            print(f"{path}: {len(s)} sites")
            for x in s:
                print("   ", describe(x, src.splitlines()))
        return 0

    # every random site; the other sites sampled round-robin over the targets (fixed seed)
    rng = random.Random(a.seed)
    chosen = []
    pools = []
    for path, src, s, test_args in per_target:
        must = lambda x: x[0] == "random" or any(m in describe(x, src.splitlines()) for m in a.must)  # noqa: E731
        rnd = [x for x in s if must(x)]
        rest = [x for x in s if not must(x)]
        rng.shuffle(rest)
        chosen += [(path, src, x, test_args) for x in rnd]
        pools.append([(path, src, x, test_args) for x in rest])
    while len(chosen) < a.max and any(pools):
        for pool in pools:
            if pool and len(chosen) < a.max:
                chosen.append(pool.pop())
    chosen = chosen[:a.max]
    if a.rerun:      # the survivors of an earlier run, against the current tests
        by_file = {p[0]: p for p in per_target}
        chosen = []
        for line in open(a.rerun):
            rec = json.loads(line)
            if rec["verdict"] == "survived" and rec["file"] in by_file:
                path, src, _, test_args = by_file[rec["file"]]
                chosen.append((path, src, tuple(rec["site"]), test_args))

    workdir = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="xmtc-mutate-"))
    main_copy = make_copy(workdir)
    out = open(a.out, "w") if a.out else None
    print(f"copy: {main_copy}; {len(chosen)} mutants", flush=True)
    # baseline: every selection passes on the unmutated copy (and imports the copy)
    probe = subprocess.run([sys.executable, "-c", "import xmtc; print(xmtc.__file__)"], cwd=main_copy,
                           env={**os.environ, "PYTHONPATH": str(main_copy)}, capture_output=True, text=True)
    if not probe.stdout.strip().startswith(str(main_copy)):
        print(f"the copy is not what imports: {probe.stdout.strip()} {probe.stderr[-300:]}")
        return 2
    for test_args in {tuple(t[3]) for t in per_target}:
        status, secs, tail = run_tests(main_copy, list(test_args), a.timeout, workers=a.workers)
        print(f"baseline {' '.join(test_args)[:80]}: {status} in {secs:.0f} s ({tail})", flush=True)
        if status != "passed":
            return 2
    counts = {}
    for i, (path, src, site, test_args) in enumerate(chosen, 1):
        target = main_copy / path
        mutated = mutate_source(src, site)
        target.write_text(mutated)
        try:
            status, secs, tail = run_tests(main_copy, test_args, a.timeout, workers=a.workers)
        finally:
            target.write_text(src)
        verdict = "survived" if status == "passed" else "killed"
        counts[verdict] = counts.get(verdict, 0) + 1
        rec = {"i": i, "file": path, "site": list(site), "mutant": describe(site, src.splitlines()),
               "verdict": verdict, "status": status, "seconds": round(secs, 1), "tail": tail}
        print(f"[{i:2d}/{len(chosen)}] {verdict:8s} {status:8s} {secs:5.0f}s {path}: {rec['mutant']}", flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
    # the copy must still equal the original package after the run
    for path, src, _, _ in per_target:
        assert (main_copy / path).read_text() == src, path
    print(f"summary: {counts.get('killed', 0)} killed, {counts.get('survived', 0)} survived of {len(chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
