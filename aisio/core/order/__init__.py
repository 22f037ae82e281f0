"""``order="deterministic"``: canonical streams, their seeded buffers and rounds, and the state
(:mod:`.streams`); the reader side, shards to chunks (:mod:`.reader`); chunks put back in
order on the training side (:mod:`.reorder`); and this order's set-up and backend of the one
loader class (:mod:`.loader`).
"""
