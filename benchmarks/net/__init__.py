"""A shaped network between the benchmark's client processes and a local AIStore.

:mod:`.spec` parses ``--network`` (pure); :mod:`.toxiproxy` builds and drives the user-space
proxy that adds the delay; :mod:`.netns` puts the client in a network namespace of its own,
with ``tc tbf`` for the bandwidth; :mod:`.probe` measures what the shaped path really gives.
"""
