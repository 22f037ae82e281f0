"""The tar/WebDataset format, with no I/O of its own: tar shards read in one place (:mod:`.tar`:
headers, the general stream reader, the fast path and runs, with compressed shards in
:mod:`.compression`), samples grouped by key (:mod:`.samples`), and field decoders and tuples
(:mod:`.decode`).
"""
