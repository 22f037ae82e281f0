"""Exactly once inside the trainers that checkpoint an aisio loader.

Every aisio loader has ``state_dict()``/``load_state_dict()``, so a trainer that saves stateful
objects saves it. Two things make that state right inside a trainer, and aisio does both:

- A trainer calls ``state_dict()`` on every rank and writes rank 0's (Lightning's Trainer,
  Fabric, accelerate). A loader's state covers the whole job by default
  (:attr:`~aisio.core.epochs.received.FollowsTrainer.state_scope`): every rank's progress
  merged, so rank 0's file resumes the whole job, on any number of ranks, whoever asks and
  however the loader is wrapped. Nothing to add for Fabric (``fabric.save(path, {"loader":
  loader, ...})``) or accelerate (``accelerator.register_for_checkpointing(loader)``).
- Lightning's Trainer fetches the next batch before it trains on the current one; at a
  checkpoint that batch was received but not trained on. The callback of
  :mod:`aisio.trainers.lightning` (``lightning`` package) or
  :mod:`aisio.trainers.pytorch_lightning` (``pytorch-lightning``) tells the loader which
  batches were trained on; without it, Lightning's training loop is refused as it starts
  iterating the loader (:class:`~aisio.UsageError` naming the line to add).

The trainers are optional extras: ``pip install 'aisio[lightning]'`` or ``'aisio[accelerate]'``.
"""
