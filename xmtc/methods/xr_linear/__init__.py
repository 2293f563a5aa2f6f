"""XR-Linear (Parabel-style label tree of linear models, beam search): :mod:`.estimator`."""
