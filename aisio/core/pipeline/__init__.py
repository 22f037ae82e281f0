"""The default (``order="fast"``) pipeline: its options, checked once (:mod:`.spec`), and the
loaders' own (:mod:`.loader_options`); reading objects (:mod:`.fetch`); shards to samples under
the error policy (:mod:`.parse`); the seeded sample shuffle (:mod:`.shuffle`); per-sample
decode and tuples, each sample's position taken along (:mod:`.stages`); one reader's epoch,
shard tasks to deliveries (:mod:`.epoch`); and the one loader class, the training-side loop
every loader shares in either order (:mod:`.loop`).
"""
