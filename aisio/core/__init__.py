"""The framework-free core: everything between an AIStore name and a decoded sample.

Nothing here imports torch's data loading, torchdata or the command line; the front ends
(:mod:`aisio.datapipes`, :mod:`aisio.loaders`) are thin layers over it. Its parts, each a
subpackage, and the one direction of imports between them are listed in :mod:`aisio._layers`:
:mod:`~aisio.core.faults` and :mod:`~aisio.core.system` at the bottom, then
:mod:`~aisio.core.format`, :mod:`~aisio.core.store`, :mod:`~aisio.core.epochs`,
:mod:`~aisio.core.transport`, :mod:`~aisio.core.pipeline` and :mod:`~aisio.core.order`.
"""
