"""ELIAS and ELIAS++: the estimator and parameters (:mod:`.estimator`), the learned label-cluster graph
network (:mod:`.network`)."""
