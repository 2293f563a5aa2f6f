"""Label-text matching (no training documents needed): the estimator and parameters (:mod:`.estimator`)."""
