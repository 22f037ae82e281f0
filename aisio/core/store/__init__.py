"""AIStore names and the cluster client: ``ais://`` names, templates and URLs (:mod:`.urls`),
what a source names (:mod:`.sources`, :mod:`.sdk`), the client configuration (:mod:`.config`),
the HTTP client with redirects, retries and byte-exact resume (:mod:`.client`), errors of the
layers below made aisio's (:mod:`.translate`), where a read through an ETL goes (:mod:`.etl`),
Get-Batch (:mod:`.batch`) and the local shard cache (:mod:`.cache`); where a loader's bytes come
from (:mod:`.protocol`): the cluster (:mod:`.ais`), a cache over any store, or memory
(:mod:`.memory`).
"""
