"""The tar/WebDataset format, with no I/O of its own: tar shards read in one place (:mod:`.tar`:
headers, the general stream reader, the fast path and runs, with compressed shards in
:mod:`.compression`) and samples grouped by key (:mod:`.samples`); their fields stay bytes
(decoding them is :mod:`aisio.core.decode`'s).
"""
