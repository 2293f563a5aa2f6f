"""Tests that pin the label-text route (``xmtc/models/label_route.py``), the label-text method
(``xmtc/methods/label_text/estimator.py``) and ALC (``xmtc/neural/alc.py``) against a definition or a
hand-computed case: each kills mutants of ``scripts/mutate.py`` that the older tests let pass (the harness picks
them by the ``pin_route`` / ``pin_label_text`` / ``pin_alc`` in their names)."""
