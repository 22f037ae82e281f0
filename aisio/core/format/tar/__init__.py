"""Tar shards, read in one place: four modules, one header reader.

- :mod:`.header`: the header's layout and its checks (ustar, pax, GNU long names, checksums,
  base-256 numbers) and the typed error for each way a header can be wrong;
- :mod:`.stream`: the general reader of a stream (:func:`iter_tar`, :class:`ShardReader`),
  every header kind and every error;
- :mod:`.fast`: the fast per-member path, plain members read straight from the read buffer,
  everything else handed to the general reader;
- :mod:`.runs`: runs of regular samples, their headers checked many at once with numpy.

The fast path and runs only vouch for headers :mod:`.header` says are plain; any other goes to
the general reader, so a shard gives the same members, offsets and errors on every path.
Grouping members into WebDataset samples is :mod:`aisio.core.format.samples`'s.
"""

from aisio.core.format.tar.header import BLOCK
from aisio.core.format.tar.stream import BinaryReadable, ShardReader, TarMember, iter_tar

__all__ = ["BLOCK", "BinaryReadable", "ShardReader", "TarMember", "iter_tar"]
