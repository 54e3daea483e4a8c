"""qops.dask on a LocalCluster of 1 and 2 worker processes.

``python benchmarks/dask_scaleout.py [--workers 1 2] [--weights-gib 1.25]
[--memory-limit 1GiB] [--images 64]`` runs two jobs on each cluster size and
prints a Markdown table:

* blocked int4 dequantization (blocks of 32 along the rows' axis, one
  float32 scale per block) of a weight set whose float32 form is larger
  than one worker's memory limit; the weights are made on the workers (from
  a few random blocks each worker makes once) and the dequantized values
  are summed, so no process ever holds them all;
* a batch of r50_3x3_56 convolutions (64 -> 64 channels, 3 x 3, padding 1,
  56 x 56, uint8 x int8), chunked four images to a task.

Per job: wall time, throughput (output bytes, or images, per second), and
each worker's peak resident memory, sampled every 50 ms.  Dask's progress
bar shows each job as it runs.  Each worker process runs one task at a time
with ``n_threads`` = cores / workers, so the cluster uses every core once.
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time

import ml_dtypes
import numpy as np

import dask.array as da
import distributed
import psutil

import qops
import qops.dask as qd


def _rss():
    return psutil.Process().memory_info().rss


class PeakMemory:
    """Each worker's peak resident memory while the block runs."""

    def __init__(self, client, interval=0.05):
        self.client, self.interval = client, interval
        self.peaks = {}
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.is_set():
            try:
                for worker, rss in self.client.run(_rss).items():
                    self.peaks[worker] = max(self.peaks.get(worker, 0), rss)
            except Exception:  # a worker restarting: sample again next time
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@functools.lru_cache(maxsize=8)
def _template(kind, shape, seed):
    """A random block, made once per worker process and reused, so that the
    job's time is the dequantization's, not the random numbers'."""
    rng = np.random.default_rng(seed)
    if kind == "codes":
        return rng.integers(-8, 8, shape, dtype=np.int8).astype(ml_dtypes.int4)
    return rng.uniform(0.001, 0.01, shape).astype(np.float32)


def _block(kind, block_info=None):
    info = block_info[None]
    return _template(kind, tuple(info["chunk-shape"]), info["chunk-location"][0] % 4)


def dequantize_job(weights_gib, n_threads, block=32, columns=4096, rows_per_chunk=512):
    """The sum of a blocked int4 weight set dequantized to float32, lazily."""
    rows = int(weights_gib * 2**30 / 4 / columns)
    rows -= rows % rows_per_chunk
    weights = da.map_blocks(_block, "codes", chunks=((rows_per_chunk,) * (rows // rows_per_chunk),
                                                      (columns,)),
                            dtype=ml_dtypes.int4, meta=np.empty((0, 0), ml_dtypes.int4))
    scales = da.map_blocks(_block, "scales",
                           chunks=((rows_per_chunk,) * (rows // rows_per_chunk),
                                   (columns // block,)),
                           dtype=np.float32, meta=np.empty((0, 0), np.float32))
    values = qd.dequantize_linear(weights, scales, axis=1, block_size=block,
                                  n_threads=n_threads)
    return values.sum(dtype=np.float64), rows * columns * 4


def convolution_job(images, n_threads, per_task=4):
    """The sum of a batch of r50_3x3_56 convolutions, lazily."""
    rng = np.random.default_rng(3)
    filter = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
    compiled = qd.compile("QUANTIZED_LINEAR_CONVOLUTION", filter=filter,
                          filter_scale=rng.uniform(0.001, 0.01, 64).astype(np.float32),
                          bias=rng.integers(-5000, 5000, 64).astype(np.int32),
                          start_padding=(1, 1), end_padding=(1, 1))
    batch = da.random.default_rng(4).integers(0, 256, (images, 64, 56, 56), dtype=np.uint8,
                                              chunks=(per_task, 64, 56, 56))
    out = compiled(batch, np.float32(0.02), np.uint8(128), np.float32(0.05), np.uint8(100),
                   n_threads=n_threads)
    return out.sum(dtype=np.int64), images


def run(workers, memory_limit, weights_gib, images):
    cores = os.cpu_count() or 1
    n_threads = max(1, cores // workers)
    rows = []
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  memory_limit=memory_limit, dashboard_address=None,
                                  silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        for label, (total, amount), unit in (
                ("int4 blocked dequantize", dequantize_job(weights_gib, n_threads), "GB/s"),
                ("r50_3x3_56 batch", convolution_job(images, n_threads), "images/s")):
            print(f"\n{label}, {workers} worker(s):")
            with PeakMemory(client) as memory:
                start = time.perf_counter()
                future = client.compute(total)
                distributed.progress(future)
                future.result()
                seconds = time.perf_counter() - start
            rate = amount / seconds / (1e9 if unit == "GB/s" else 1)
            peak = max(memory.peaks.values()) / 2**20 if memory.peaks else float("nan")
            rows.append((label, workers, seconds, f"{rate:.2f} {unit}", f"{peak:.0f} MiB"))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--weights-gib", type=float, default=1.25,
                        help="the dequantized (float32) weight set's size")
    parser.add_argument("--memory-limit", default="1GiB", help="per worker")
    parser.add_argument("--images", type=int, default=64)
    args = parser.parse_args(argv)
    rows = []
    for workers in args.workers:
        rows += run(workers, args.memory_limit, args.weights_gib, args.images)
    print(f"\nqops {qops.__version__}, {os.cpu_count()} cores, memory limit "
          f"{args.memory_limit} per worker, weights {args.weights_gib} GiB as float32\n")
    print("| job | workers | seconds | throughput | peak memory per worker |")
    print("|---|---|---|---|---|")
    for label, workers, seconds, rate, peak in rows:
        print(f"| {label} | {workers} | {seconds:.2f} | {rate} | {peak} |")


if __name__ == "__main__":
    main()
