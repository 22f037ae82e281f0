"""Decoding a sample's fields, bytes to values, for the per-sample stage: decoders by suffix,
the :class:`~.decoders.Decoder` class, field pickers and tuples (:mod:`.decoders`), images to
PIL, numpy or torch (:mod:`.images`), and which stages a run of regular samples can stand in
for (:mod:`.runs`). The stage that applies them is :mod:`aisio.core.pipeline.stages`; the
samples come from :mod:`aisio.core.format`.
"""
