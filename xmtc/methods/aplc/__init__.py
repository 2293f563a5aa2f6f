"""APLC-XLNet: the estimator and parameters (:mod:`.estimator`), the adaptive probabilistic label clusters
network (:mod:`.network`), its loss (:mod:`.loss`) and the frequency split of the labels into clusters
(:mod:`.label_split`)."""
