"""CascadeXML: the estimator and parameters (:mod:`.estimator`), the multi-resolution cascade network
(:mod:`.network`)."""
