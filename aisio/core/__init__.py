"""The framework-free core: everything between an AIStore name and a decoded sample.

Nothing here imports torch's data loading, torchdata or the command line; the front ends
(:mod:`aisio.datapipes`, ...) are thin layers over these modules.

- :mod:`~aisio.core.urls`: ``ais://`` names, templates, object URLs, ETL query parameters;
  :mod:`~aisio.core.etl`: where a read through an ETL goes (a local ETL server or the cluster).
- :mod:`~aisio.core.sources`: the one owner of "what does this source name?".
- :mod:`~aisio.core.config`: :class:`AISConfig`, from arguments and the environment.
- :mod:`~aisio.core.errors`: the exception tree; :mod:`~aisio.core.translate` maps HTTP
  answers and transport failures onto it, in one place.
- :mod:`~aisio.core.client`: the HTTP client (redirects, retries, byte-exact resume);
  :mod:`~aisio.core.batch`: AIStore's Get-Batch.
- :mod:`~aisio.core.tar`, :mod:`~aisio.core.samples`: streamed tar parsing and WebDataset grouping.
- :mod:`~aisio.core.decode`: field decoders and ``to_tuple``.
- :mod:`~aisio.core.cache`: the local shard cache; :mod:`~aisio.core.report`: what was skipped.
- :mod:`~aisio.core.sdk`: aistore SDK objects as sources; :mod:`~aisio.core.threads`: an
  ordered thread map.
- :mod:`~aisio.core.order`, :mod:`~aisio.core.order_reader`, :mod:`~aisio.core.order_loop`:
  the deterministic order; :mod:`~aisio.core.ordered`: the loader every front end shares for
  ``order="deterministic"``.
"""
