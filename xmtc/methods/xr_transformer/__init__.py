"""XR-Transformer and X-Transformer: parameters (:mod:`.config`), the estimators (:mod:`.estimator`),
multi-resolution fine-tuning (:mod:`.finetune`), the eq. 11 head bootstrap (:mod:`.bootstrap`), the neural
matcher's beam (:mod:`.matcher`), the ranking stage trained on the fine-tuned embeddings (:mod:`.rankers`) and the
model folder's stages (:mod:`.stages`)."""
