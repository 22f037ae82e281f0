"""The tar/WebDataset format, with no I/O of its own: streamed tar parsing (:mod:`.tar`, with
compressed shards in :mod:`.compression`), samples grouped by key (:mod:`.samples`), field
decoders and tuples (:mod:`.decode`), and collating a batch (:mod:`.collate`).
"""
