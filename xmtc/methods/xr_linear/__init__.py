"""XR-Linear (Parabel-style label tree of linear models, beam search): the estimator (:mod:`.estimator`), its
parameters (:mod:`.config`) and its model folder's stages (:mod:`.stages`)."""
