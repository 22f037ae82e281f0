"""The default (``order="fast"``) pipeline: its options, checked once (:mod:`.spec`); reading
objects (:mod:`.fetch`); shards to samples under the error policy (:mod:`.parse`); per-sample
decode and tuples (:mod:`.stages`); and the training-side loop every loader shares
(:mod:`.loop`).
"""
