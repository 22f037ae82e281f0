"""What every front end needs from torch while it runs, in one place that each may import
without importing another front end.

- :mod:`~aisio.runtime.setup`: the set-up every one-call loader starts from (options checked,
  the shards agreed by every rank, the seed, the rank) and the loader it ends in.
- :mod:`~aisio.runtime.dist`: rank and world, the shared seed, ``uneven="drop"``,
  :func:`gather_state`.
- :mod:`~aisio.runtime.workers`: worker processes that end with the training process, and
  which worker this process is.
- :mod:`~aisio.runtime.collate`: torch's ``default_collate`` with a batch's tensors stacked by
  one thread in the training process.
"""
