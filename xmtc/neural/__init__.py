"""The neural core every neural method shares (the methods' own networks live in :mod:`xmtc.methods`).

The end-to-end training loop (:mod:`.training_loop`), its eval-mode passes (:mod:`.inference`) and weight
snapshots (:mod:`.weight_snapshots`), and the :class:`~.network.Network` contract a method's network fills
in; row-sparse label heads and their lazy Adam (:mod:`.heads`); the encoder's optimiser and schedule
(:mod:`.optim`); losses (:mod:`.losses`), shortlists (:mod:`.shortlist`) and negative samplers
(:mod:`.negatives`, :mod:`.contrastive`); data-driven head starts (:mod:`.head_init`); ALC's auxiliary
objective (:mod:`.alc`); DDP (:mod:`.distributed`); checkpoints (:mod:`.checkpoint`) and deterministic CPU
kernels (:mod:`.reproducible`). Importing this package imports no torch.
"""
