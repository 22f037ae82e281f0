"""What crosses from reader processes to the training process: deliveries (a value with its
samples' positions) and errors as items (:mod:`.delivery`), through a ring of reused
shared-memory buffers (:mod:`.ring`).
"""
