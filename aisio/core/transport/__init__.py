"""What crosses from reader processes to the training process: a batch assembled by the
collate function, with the samples that did not fit named when it fails (:mod:`.collate`),
deliveries (a value with its samples' positions) and errors as items (:mod:`.delivery`),
through a ring of reused shared-memory buffers (:mod:`.ring`).
"""
