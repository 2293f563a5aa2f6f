"""The dual encoder (text and label-text embeddings, nearest-neighbour search): the estimator and parameters
(:mod:`.estimator`), the contrastive network (:mod:`.network`)."""
