"""Figures derived from the run's records, one rule each, used on both sides of the run
folder: by the measuring side as it records (harness.measure, harness.run) and by
analysis as it reads the folder back (harness.analysis), so the two never disagree.

bursts: whether a request's tokens arrived in bursts of more than one per chunk;
itl: inter-token latencies and tokens per chunk from a request's stamps;
throttle: a cell's GPU throttling from its NVML samples;
usable: whether an attempt at a cell measured anything a bar can use.

Each reads `harness.records` alone: importing one loads neither the load driver nor
the engines.
"""
