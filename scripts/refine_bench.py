#!/usr/bin/env python3
"""Seeded benchmark of `nanobragg refine` from typical post-indexing errors.

Each still i (a function of --seed and i only) draws a crystal (cubic,
tetragonal, orthorhombic, monoclinic or triclinic; lengths 40-110 A, N 5-20,
a random orientation), a detector (512 or 1024 pixels of 0.075-0.172 mm, the
distance putting 2.5 A or so at the edge), renders a Poisson noise image
with about 2e5 Bragg photons, then refines detector and crystal together
(distance, Xbeam, Ybeam, the free cell constants, misset_x/y/z) from a start
drawn up to 0.5 deg per misset angle, 1 % per cell length, 2 mm of distance
and 3 pixels of beam centre off.

A still counts as
  ok        refine succeeded and every parameter is within 3 standard errors
  flagged   refine said the fit failed (non-zero exit, "the fit failed")
  WRONG     refine succeeded but some parameter is off by more than 3 sigma
The target (issue 17) is ok >= 95 % and WRONG = 0. Times per still are
reported by image size.

With --panels the detector is four square modules (2 x 2, a 4-pixel gap)
of a CrystFEL geometry file: the start's modules sit where the nominal
geometry puts them; the truth moves the whole detector (2 mm, 3 pixels) and
each module on its own (up to 1 pixel along fast and slow, 0.3 mm along the
normal), and refine fits each module's Xbeam@K, Ybeam@K, close_distance@K
with the crystal.

    scripts/refine_bench.py --bin target/release/nanobragg --stills 40 --seed 1 [--panels]
"""

import argparse
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time

FAMILIES = ["cubic", "tetragonal", "orthorhombic", "monoclinic", "triclinic"]


def draw_still(seed, i):
    r = random.Random(seed * 100003 + i)
    family = FAMILIES[i % len(FAMILIES)]
    a = r.uniform(40, 110)
    b, c = r.uniform(40, 110), r.uniform(40, 110)
    al = be = ga = 90.0
    if family == "cubic":
        b = c = a
    elif family == "tetragonal":
        b = a
    elif family == "monoclinic":
        be = r.uniform(95, 115)
    elif family == "triclinic":
        al, be, ga = r.uniform(80, 100), r.uniform(95, 110), r.uniform(80, 100)
    cell = [a, b, c, al, be, ga]
    n = r.randint(5, 20)
    pixel = r.choice([0.075, 0.1, 0.11, 0.172])
    pixels = 1024 if i % 4 == 3 else 512
    # edge of the detector at about 2.5 A (lambda 1 A): tan(2 theta) = half width / distance
    half = pixels * pixel / 2
    two_theta = 2 * math.asin(1.0 / (2 * 2.5))
    distance = round(half / math.tan(two_theta), 2)
    misset = [r.uniform(-180, 180), r.uniform(-90, 90), r.uniform(-180, 180)]
    centre = [half + r.uniform(-10, 10) * pixel, half + r.uniform(-10, 10) * pixel]
    truth = {
        "cell": cell,
        "N": n,
        "pixel": pixel,
        "pixels": pixels,
        "distance": distance,
        "misset": misset,
        "Xbeam": centre[0],
        "Ybeam": centre[1],
    }
    start = dict(truth)
    start["misset"] = [m + r.uniform(-0.5, 0.5) for m in misset]
    start["cell"] = [x * (1 + r.uniform(-0.01, 0.01)) for x in cell[:3]] + cell[3:]
    start["distance"] = distance + r.uniform(-2, 2)
    start["Xbeam"] = centre[0] + r.uniform(-3, 3) * pixel
    start["Ybeam"] = centre[1] + r.uniform(-3, 3) * pixel
    params = ["distance", "Xbeam", "Ybeam", "cell_a", "misset_x", "misset_y", "misset_z"]
    if family in ("orthorhombic", "monoclinic", "triclinic"):
        params[4:4] = ["cell_b", "cell_c"]
    elif family == "tetragonal":
        params[4:4] = ["cell_c"]
    if family == "monoclinic":
        params.insert(-3, "cell_beta")
    if family == "triclinic":
        params[-3:-3] = ["cell_alpha", "cell_beta", "cell_gamma"]
    # cubic and tetragonal: the refined cell_a moves a alone (cell_b, cell_c held)
    if family == "cubic":
        params[4:4] = ["cell_b", "cell_c"]
    elif family == "tetragonal":
        params.insert(4, "cell_b")
    return family, truth, start, params, 1000 + i


GAP = 4


def add_panels(seed, i, truth, start):
    """Four modules: the start's as the nominal geometry puts them, the
    truth's moved with the detector and each on its own; the parameters."""
    r = random.Random(seed * 100019 + i)
    modules = []
    for k in range(4):
        modules.append([r.uniform(-1, 1), r.uniform(-1, 1), r.uniform(-0.3, 0.3)])
    truth["modules"] = modules
    start["modules"] = [[0.0, 0.0, 0.0] for _ in range(4)]
    # the start's "distance", "Xbeam", "Ybeam" are the nominal geometry's
    for k in range(4):
        for name, value in panel_values(truth, k).items():
            truth[f"{name}@{k}"] = value


def panel_corners(m, k):
    """Module k's first-pixel corner (CrystFEL pixels from the beam) and offset (m)."""
    half = m["pixels"] // 2
    ox, oy = (k % 2) * (half + GAP), (k // 2) * (half + GAP)
    dx, dy, dz = m["modules"][k]
    cx = ox - m["Xbeam"] / m["pixel"] + dx
    cy = oy - m["Ybeam"] / m["pixel"] + dy
    return cx, cy, dz * 1e-3


def panel_values(m, k):
    """Module k's own single-panel flags (see docs/detectors.md)."""
    cx, cy, dz = panel_corners(m, k)
    return {"Xbeam": -cx * m["pixel"], "Ybeam": -cy * m["pixel"],
            "close_distance": m["distance"] + dz * 1e3}


def write_geom(m, path):
    half = m["pixels"] // 2
    text = f"clen = {m['distance'] / 1000:.9f}\nres = {1000 / m['pixel']:.9f}\nphoton_energy = 12398.42 eV\n"
    for k in range(4):
        cx, cy, dz = panel_corners(m, k)
        text += (f"q{k}/min_fs = 0\nq{k}/max_fs = {half - 1}\nq{k}/min_ss = {k * half}\n"
                 f"q{k}/max_ss = {(k + 1) * half - 1}\nq{k}/corner_x = {cx:.9f}\n"
                 f"q{k}/corner_y = {cy:.9f}\nq{k}/coffset = {dz:.12f}\n"
                 f"q{k}/fs = +1x +0y +0z\nq{k}/ss = +0x +1y +0z\n")
    with open(path, "w") as fh:
        fh.write(text)


def model_flags(m):
    f = ["-cell"] + [f"{x:.6f}" for x in m["cell"]]
    if "modules" in m:
        f = ["-geom", m["geom"]] + f + ["-N", str(m["N"]), "-misset"] + [f"{x:.6f}" for x in m["misset"]]
        f += ["-lambda", "1.0", "-default_F", "200", "-oversample", "1", "-nopgm"]
        return f
    f += ["-N", str(m["N"]), "-pixel", str(m["pixel"]), "-detpixels", str(m["pixels"])]
    f += ["-distance", f"{m['distance']:.6f}", "-Xbeam", f"{m['Xbeam']:.6f}"]
    f += ["-Ybeam", f"{m['Ybeam']:.6f}", "-misset"] + [f"{x:.6f}" for x in m["misset"]]
    f += ["-lambda", "1.0", "-default_F", "200", "-oversample", "1", "-nopgm"]
    return f


def true_value(truth, name):
    idx = {"cell_a": 0, "cell_b": 1, "cell_c": 2, "cell_alpha": 3, "cell_beta": 4, "cell_gamma": 5}
    if name in idx:
        return truth["cell"][idx[name]]
    if name.startswith("misset_"):
        return truth["misset"]["xyz".index(name[-1])]
    return truth[name]


def photons(path):
    data = open(path, "rb").read()
    return sum(v for v in memoryview(data).cast("f"))


def run_still(binary, work, seed, i, threads, panels):
    family, truth, start, params, noise_seed = draw_still(seed, i)
    d = os.path.join(work, f"still{i:03d}")
    os.makedirs(d, exist_ok=True)
    if panels:
        add_panels(seed, i, truth, start)
        for m, name in ((truth, "truth.geom"), (start, "start.geom")):
            m["geom"] = name
            write_geom(m, os.path.join(d, name))
        params = [p for p in params if p not in ("distance", "Xbeam", "Ybeam")]
        params += ["Xbeam@*", "Ybeam@*", "close_distance@*"]
    t = ["-threads", str(threads)]
    # scale the fluence to about 2e5 photons
    probe = [binary] + model_flags(truth) + t + ["-fluence", "1e26", "-floatfile", "p.bin", "-nonoise"]
    subprocess.run(probe, cwd=d, check=True, capture_output=True)
    fluence = 1e26 * 2e5 / max(photons(os.path.join(d, "p.bin")), 1e-30)
    render = [binary] + model_flags(truth) + t + ["-fluence", f"{fluence:.6e}", "-noisefile", "obs.img", "-seed", str(noise_seed)]
    subprocess.run(render, cwd=d, check=True, capture_output=True)
    cmd = [binary, "refine", "-observed", "obs.img", "-refine", ",".join(params)]
    cmd += model_flags(start) + t + ["-fluence", f"{fluence:.6e}"]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    secs = time.time() - t0
    text = out.stdout + out.stderr
    with open(os.path.join(d, "refine.log"), "w") as fh:
        fh.write(" ".join(cmd) + "\n" + text)
    rows = {}
    on = False
    for line in out.stdout.splitlines():
        f = line.split()
        if f and f[0] == "parameter":
            on = True
            continue
        if on and len(f) == 6:
            rows[f[0]] = (float(f[3]), None if f[4] in ("-", "singular") else float(f[4]))
        elif on and rows:
            break
    check = next((l for l in out.stdout.splitlines() if l.startswith("fit check:")), "")
    if out.returncode != 0:
        status = "flagged" if "the fit failed" in text else "error"
        worst = None
    else:
        zs = []
        names = [p for p in params if not p.endswith("@*")]
        names += [f"{p[:-2]}@{k}" for p in params if p.endswith("@*") for k in range(4)]
        for p in names:
            v, se = rows[p]
            zs.append(abs(v - true_value(truth, p)) / se if se else math.inf)
        worst = max(zs)
        status = "ok" if worst < 3 else "WRONG"
    if status == "error":
        print(text, file=sys.stderr)
    return family, truth["pixels"], status, worst, secs, check


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/nanobragg")
    ap.add_argument("--stills", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work", default=None, help="scratch directory (kept: refine.log per still)")
    ap.add_argument("--only", type=int, nargs="*", help="run only these still numbers")
    ap.add_argument("--panels", action="store_true", help="a detector of four modules (see above)")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    work = args.work or tempfile.mkdtemp(prefix="refine_bench.")
    print(f"# scratch: {work}")
    counts = {}
    times = {}
    for i in args.only if args.only else range(args.stills):
        family, pixels, status, worst, secs, check = run_still(binary, work, args.seed, i, args.threads, args.panels)
        counts[status] = counts.get(status, 0) + 1
        times.setdefault(pixels, []).append(secs)
        z = "-" if worst is None else f"{worst:.2f}"
        print(f"still {i:3d} {family:12s} {pixels:4d}^2  {status:7s} max|z| {z:>6s}  {secs:6.1f} s  {check}", flush=True)
    total = sum(counts.values())
    print("# " + ", ".join(f"{k} {v}/{total}" for k, v in sorted(counts.items())))
    for px, ts in sorted(times.items()):
        ts = sorted(ts)
        print(f"# {px}^2: {len(ts)} stills, median {ts[len(ts) // 2]:.1f} s, max {ts[-1]:.1f} s")


if __name__ == "__main__":
    main()
