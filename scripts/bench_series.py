#!/usr/bin/env python3
"""A rotation series in one run against the same images rendered one run each,
side by side in one run (docs/formats.md, Rotation series).

    python3 scripts/bench_series.py [--images 100] [--runs 3] [--bin target/release/nanobragg]

The series: `-phi 30 -osc 0.5 -images N` at 256 x 256 pixels, noise images with
`-seed 7`, written as one NXmx file. The reference: N runs of one image each,
image k with `-phi 30+0.5k -seed 7+k`, each writing its own NXmx file. The two
take turns (every run writes new files, removed before it), the best of --runs
is reported; then every frame of the series is compared with its single run's
(h5py), which must be equal bit for bit.
"""

import argparse
import os
import subprocess
import tempfile
import time

MODEL = ("-default_F 100 -cell 70 80 90 75 85 95 -N 5 -lambda 1 -distance 100 "
         "-detpixels 256 -pixel 0.2 -mosaic 0.3 -mosaic_domains 5 -nopgm").split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default="target/release/nanobragg")
    args = ap.parse_args()
    exe = os.path.abspath(args.bin)
    n = args.images
    with tempfile.TemporaryDirectory() as d:
        def series():
            for f in os.listdir(d):
                if f.startswith("s"):
                    os.remove(os.path.join(d, f))
            subprocess.run([exe, *MODEL, "-phi", "30", "-osc", "0.5", "-images", str(n),
                            "-seed", "7", "-nxmxfile", "s.nxs"],
                           cwd=d, check=True, capture_output=True)

        def singles():
            for k in range(n):
                name = f"a{k:05}.nxs"
                if os.path.exists(os.path.join(d, name)):
                    os.remove(os.path.join(d, name))
                subprocess.run([exe, *MODEL, "-phi", repr(30 + 0.5 * k), "-osc", "0.5",
                                "-seed", str(7 + k), "-nxmxfile", name],
                               cwd=d, check=True, capture_output=True)

        best = {"series": float("inf"), "singles": float("inf")}
        for _ in range(args.runs):
            for name, fn in (("series", series), ("singles", singles)):
                t = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t)
        import h5py
        import numpy as np
        with h5py.File(os.path.join(d, "s.nxs"), "r") as f:
            frames = f["/entry/data/data"]
            assert frames.shape[0] == n
            for k in range(n):
                with h5py.File(os.path.join(d, f"a{k:05}.nxs"), "r") as g:
                    if not np.array_equal(frames[k], g["/entry/data/data"][0]):
                        raise SystemExit(f"frame {k} differs from its single run")
            phi = f["/entry/sample/transformations/phi"][()]
            assert np.allclose(phi, 30 + 0.5 * np.arange(n))
    print(f"{n} images of 256 x 256, best of {args.runs}:")
    print(f"  one series (one NXmx file): {best['series']:.3f} s")
    print(f"  {n} single runs:            {best['singles']:.3f} s")
    print(f"  ratio: {best['singles'] / best['series']:.1f}x; every frame bit-identical")


if __name__ == "__main__":
    main()
