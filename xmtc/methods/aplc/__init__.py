"""APLC-XLNet: the estimator and parameters (:mod:`.estimator`), the adaptive probabilistic label clusters
network (:mod:`.network`)."""
