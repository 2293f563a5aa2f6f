"""kNN voting over the nearest training texts: the estimator and parameters (:mod:`.estimator`)."""
