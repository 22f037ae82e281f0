"""Tools for people, not pipelines: the ``aisio`` command and the Jupyter views.

``aisio.tools.ls``, ``stat``, ``summarize`` and ``list_buckets`` list and describe buckets;
``head``, ``show_samples`` and ``image_grid`` preview the samples of a shard; each renders as an
HTML table in Jupyter and as text elsewhere. The command line lives in :mod:`aisio.tools.cli`.
"""

from aisio.tools.explore import BucketSummary, Listing, list_buckets, ls, stat, summarize
from aisio.tools.preview import Samples, SampleView, head, image_grid, show_samples

__all__ = [
    "BucketSummary",
    "Listing",
    "SampleView",
    "Samples",
    "head",
    "image_grid",
    "list_buckets",
    "ls",
    "show_samples",
    "stat",
    "summarize",
]
