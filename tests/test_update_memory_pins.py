"""Tests that pin learn's update of a tree model (``xmtc/linear/update.py``) and the training memory
(``xmtc/models/memory.py``) against a definition or a hand-computed case: each kills mutants of
``scripts/mutate.py`` that the older tests let pass (the harness picks them by the ``pin_update`` / ``pin_memory``
in their names)."""
