"""XR-Transformer and X-Transformer: parameters (:mod:`.config`), the estimators (:mod:`.estimator`),
multi-resolution fine-tuning (:mod:`.finetune`), the eq. 11 head bootstrap (:mod:`.bootstrap`) and the neural
matcher's beam (:mod:`.matcher`)."""
