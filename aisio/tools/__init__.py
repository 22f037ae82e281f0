"""Tools for people, not pipelines: the ``aisio`` command and the Jupyter views.

``aisio.tools.ls``, ``stat``, ``summarize`` and ``list_buckets`` list and describe buckets;
``head``, ``show_samples`` and ``image_grid`` preview the samples of a shard; each renders as an
HTML table in Jupyter and as text elsewhere. The command line lives in :mod:`aisio.tools.cli`.
"""

from typing import Any

from aisio._lazy import lazy_attribute

# Imported on first use: the command line (aisio.tools.cli) must not pay for the previews'
# imports (torch, through the DataPipes) when it only lists a bucket.
_LAZY = {
    **dict.fromkeys(("BucketSummary", "Listing", "list_buckets", "ls", "stat", "summarize"),
                    "aisio.tools.explore"),
    **dict.fromkeys(("SampleView", "Samples", "head", "image_grid", "show_samples"),
                    "aisio.tools.preview"),
    **dict.fromkeys(("Bottleneck", "bottleneck"), "aisio.tools.speed"),
}

__all__ = [
    "Bottleneck",
    "BucketSummary",
    "Listing",
    "SampleView",
    "Samples",
    "bottleneck",
    "head",
    "image_grid",
    "list_buckets",
    "ls",
    "show_samples",
    "stat",
    "summarize",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
