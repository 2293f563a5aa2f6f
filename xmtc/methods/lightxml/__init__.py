"""LightXML: the estimator and parameters (:mod:`.estimator`), the generator / discriminator network
(:mod:`.network`)."""
