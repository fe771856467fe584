#!/usr/bin/env python3
"""Peak memory of a -batch against one shot, with a large -hkl table.

    python3 scripts/memory_batch.py [--bin target/release/nanobragg] [--shots 20]

Writes a 30 MB -hkl file (h, k, l in -68..68, -68..68, -52..52: 2 million
reflections), then runs, each in its own process, with the peak resident
memory of each read from wait4:
  1. one shot on a single 1024 x 1024 panel;
  2. a --shots -batch on that panel;
  3. a --shots -batch on the same pixels cut into 32 panels of 256 x 128 (an
     experiment list).
A batch holds one structure-factor grid whatever its shots and panels, so
2 and 3 stay within one grid's bytes of 1 (the script says whether they
do). Every run writes new float files.
"""

import argparse
import os
import subprocess
import tempfile

from bench_panels import write_expt  # (scripts/ is on the path when run as a script)

MODEL = "-hkl big.hkl -default_F 0 -N 5 -oversample 1 -nonoise -nopgm"
# the experiment list gives the 32-panel run its crystal, beam and detector
SINGLE = "-cell 79 79 38 90 90 90 -lambda 1 -distance 100 -pixel 0.1 -detpixels 1024"
H, K, L = 68, 68, 52


def write_hkl(path):
    with open(path, "w") as f:
        for h in range(-H, H + 1):
            for k in range(-K, K + 1):
                f.write("".join(f"{h} {k} {l} {(h * 7 + k * 3 + l) % 97 + 1.5}\n"
                                for l in range(-L, L + 1)))


def write_tiles(path):
    """1024 x 1024 pixels of 0.1 mm as 32 panels of 256 x 128, 100 mm away."""
    panels = []
    for row in range(8):
        for col in range(4):
            panels.append({"name": f"T{row * 4 + col}",
                           "origin": [-51.2 + col * 25.6, 51.2 - row * 12.8, -100.0],
                           "fast_axis": [1.0, 0.0, 0.0], "slow_axis": [0.0, -1.0, 0.0],
                           "pixel_size": [0.1, 0.1], "image_size": [256, 128]})
    write_expt(path, panels, abc=(79.0, 79.0, 38.0))


def peak_mib(cmd, cwd):
    """Runs `cmd` and returns its peak resident memory (MiB)."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    p.stderr.close()
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    return usage.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release/nanobragg")
    ap.add_argument("--shots", type=int, default=20)
    a = ap.parse_args()
    exe = os.path.abspath(a.bin)
    with tempfile.TemporaryDirectory() as d:
        write_hkl(os.path.join(d, "big.hkl"))
        write_tiles(os.path.join(d, "tiles.expt"))
        with open(os.path.join(d, "shots.txt"), "w") as f:
            f.write("".join(f"{3 * i} {2 * i} {i}\n" for i in range(a.shots)))
        hkl_mb = os.path.getsize(os.path.join(d, "big.hkl")) / 1e6
        grid_mib = (2 * H + 1) * (2 * K + 1) * (2 * L + 1) * 8 / 2**20
        one = f"{MODEL} {SINGLE} -floatfile one.bin".split()
        batch = f"{MODEL} {SINGLE} -batch shots.txt -floatfile b.bin".split()
        panels = f"{MODEL} -expt tiles.expt -batch shots.txt -floatfile p.bin".split()
        runs = [("one shot, one panel", one), (f"{a.shots}-shot -batch, one panel", batch),
                (f"{a.shots}-shot -batch, 32 panels", panels)]
        peaks = [peak_mib([exe] + cmd, d) for _, cmd in runs]
    print(f"-hkl file {hkl_mb:.1f} MB; its grid {grid_mib:.1f} MiB")
    for (name, _), peak in zip(runs, peaks):
        extra = peak - peaks[0]
        verdict = "" if name.startswith("one") else (
            f"  {extra:+.1f} MiB: {'within' if extra <= grid_mib else 'MORE than'} one grid")
        print(f"{name:28s} peak RSS {peak:8.1f} MiB{verdict}")


if __name__ == "__main__":
    main()
