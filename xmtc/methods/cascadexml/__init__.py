"""CascadeXML: the estimator and parameters (:mod:`.estimator`), the multi-resolution cascade network
(:mod:`.network`), its prediction cascade (:mod:`.prediction`) and its per-level settings (:mod:`.settings`)."""
