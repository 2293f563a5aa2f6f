"""Hyperparameter search for ``xmtc tune``, with Optuna, on the validation split ``xmtc train`` holds out.

* :mod:`.space` -- search spaces: ``--param NAME=LOW..HIGH[:log] | a,b,c`` and each method's declared
  default space (``TUNE_SPACE`` on its config dataclass), checked against the dataclass's fields;
* :mod:`.objective` -- one trial: the split, the TF-IDF cache, the metric per document;
* :mod:`.study` -- the study: the defaults as the first trial, resumable storage, the noise test that
  decides between the best trial and the defaults, the table of trials.

Optuna is an optional dependency (``pip install 'xmtc[tune]'``), imported only when a study runs.
"""
