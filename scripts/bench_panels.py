#!/usr/bin/env python3
"""A 16-megapixel multi-panel render against a single 4096 x 4096 panel, side
by side in one run (docs/detectors.md).

    python3 scripts/bench_panels.py [--runs 5] [--threads N] [--bin target/release/nanobragg]

The detector: 32 modules of 1024 x 512 pixels of 0.075 mm (Jungfrau-16M-like:
4 columns x 8 rows, gaps of 2 and 4 mm, each module turned a little) 120 mm
from the sample, written as a DIALS experiment list; the single panel:
4096 x 4096 pixels of the same size at the same distance. Both: the bench
crystal, 2 x 2 sub-pixels, float image only. A third run cuts the single
panel's own pixels into 32 panels (the same pixels, so only the cost of the
panels shows). Every run writes a new
float file (removed before each run); the three take turns, and the best
of --runs is reported.
"""

import argparse
import json
import math
import os
import subprocess
import tempfile
import time

COMMON = "-default_F 100 -N 5 -oversample 2 -nonoise -nopgm -floatfile float.bin"


def write_expt(path, panels, abc=(100.0, 100.0, 100.0)):
    """An experiment list of `panels`: the bench crystal (orthogonal, edges `abc` in Å: 100 Å
    cubic), 1 Å along -z."""
    cell = [[abc[0], 0.0, 0.0], [0.0, abc[1], 0.0], [0.0, 0.0, abc[2]]]
    expt = {"__id__": "ExperimentList",
            "experiment": [{"__id__": "Experiment", "beam": 0, "detector": 0, "crystal": 0}],
            "beam": [{"direction": [0.0, 0.0, 1.0], "wavelength": 1.0}],
            "detector": [{"panels": panels}],
            "crystal": [{"real_space_a": cell[0], "real_space_b": cell[1],
                         "real_space_c": cell[2]}]}
    with open(path, "w") as f:
        json.dump(expt, f)


def experiment(path):
    panels = []
    for row in range(8):
        for col in range(4):
            k = row * 4 + col
            a = 0.002 * math.sin(k)  # small turn about the beam
            fast = [math.cos(a), math.sin(a), 0.0]
            slow = [math.sin(a), -math.cos(a), 0.0]
            x = -2 * (1024 * 0.075 + 2.0) + col * (1024 * 0.075 + 2.0)
            y = 4 * (512 * 0.075 + 4.0) - row * (512 * 0.075 + 4.0)
            panels.append({"name": f"M{k}", "origin": [x, y, -120.0], "fast_axis": fast,
                           "slow_axis": slow, "pixel_size": [0.075, 0.075],
                           "image_size": [1024, 512]})
    write_expt(path, panels)


def tiles(path):
    """The single panel's 4096 x 4096 pixels cut into 32 panels of 1024 x 512."""
    panels = []
    for row in range(8):
        for col in range(4):
            panels.append({"name": f"T{row * 4 + col}",
                           "origin": [-153.6 + col * 1024 * 0.075, 153.6 - row * 512 * 0.075, -120.0],
                           "fast_axis": [1.0, 0.0, 0.0], "slow_axis": [0.0, -1.0, 0.0],
                           "pixel_size": [0.075, 0.075], "image_size": [1024, 512]})
    write_expt(path, panels)


def best(cmds, cwd, runs):
    """The best time of each command, the commands taking turns (so that a
    slower spell of the machine falls on all of them)."""
    times = [[] for _ in cmds]
    for _ in range(runs + 1):  # one warm-up
        for cmd, t in zip(cmds, times):
            out = os.path.join(cwd, "float.bin")
            if os.path.exists(out):
                os.remove(out)
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
            t.append(time.perf_counter() - t0)
    return [min(t[1:]) for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bin", default="target/release/nanobragg")
    a = ap.parse_args()
    exe = os.path.abspath(a.bin)
    with tempfile.TemporaryDirectory() as d:
        experiment(os.path.join(d, "jf16m.expt"))
        tiles(os.path.join(d, "tiles.expt"))
        threads = f" -threads {a.threads}"
        multi = [exe] + (f"-expt jf16m.expt {COMMON}" + threads).split()
        tiled = [exe] + (f"-expt tiles.expt {COMMON}" + threads).split()
        single = [exe] + ("-dials -lambda 1 -cell 100 100 100 90 90 90 -distance 120 "
                          f"-detpixels 4096 -pixel 0.075 {COMMON}" + threads).split()
        t_single, t_multi, t_tiled = best([single, multi, tiled], d, a.runs)
    print(f"{a.threads} threads, best of {a.runs}")
    print(f"single 4096 x 4096 panel:          {t_single:.3f} s")
    print(f"32 modules of 1024 x 512 (gaps):   {t_multi:.3f} s ({(t_multi / t_single - 1) * 100:+.1f} %)")
    print(f"its pixels as 32 tiles, no gaps:   {t_tiled:.3f} s ({(t_tiled / t_single - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
