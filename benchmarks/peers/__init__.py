"""aisio beside its peers (litdata, MosaicML streaming, s3torchconnector, the aistore SDK's
datasets) on one AIStore: ``python -m benchmarks.suite --peers``."""
