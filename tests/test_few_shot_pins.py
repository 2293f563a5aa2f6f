"""Tests that pin the few-shot stage (``xmtc/models/few_shot.py``, ``few_shot_scores.py``, ``few_shot_chars.py``,
``few_shot_words.py``) against a definition or a hand-computed case: each kills mutants of ``scripts/mutate.py``
that the older tests let pass (the harness runs this file with the stage's other tests)."""
