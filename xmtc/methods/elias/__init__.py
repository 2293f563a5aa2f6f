"""ELIAS and ELIAS++: the estimator and parameters (:mod:`.estimator`), the learned label-cluster graph
network (:mod:`.network`), its loss (:mod:`.loss`) and the cluster -> label adjacency of each stage
(:mod:`.adjacency`)."""
