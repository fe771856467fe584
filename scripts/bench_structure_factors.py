#!/usr/bin/env python3
"""Structure factors of a lysozyme-sized model (2,000 atoms, P 43 21 2,
79.1 x 79.1 x 37.9 Å, half the atoms anisotropic) to 2 Å by direct
summation: `nanobragg sf` against gemmi (StructureFactorCalculatorX) and
cctbx (xray.structure, algorithm="direct"), side by side in one run.

    python scripts/bench_structure_factors.py [NANOBRAGG_EXE] [THREADS]

Each program is timed on its whole sphere of reflections (gemmi: one call
per reflection of cctbx's asymmetric unit, then ×8 for the sphere is not
applied: gemmi's time is for the asymmetric unit only, which flatters it).
Every nanobragg run writes a new file. Needs gemmi and cctbx-base (pip).
"""
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import iotbx.pdb  # cctbx before gemmi: the other order crashes (cctbx-base 2025.11)
import gemmi

exe = sys.argv[1] if len(sys.argv) > 1 else "target/release/nanobragg"
threads = sys.argv[2] if len(sys.argv) > 2 else "2"
dmin = 2.0
rng = np.random.default_rng(7)
st = gemmi.Structure()
st.cell = gemmi.UnitCell(79.1, 79.1, 37.9, 90, 90, 90)
st.spacegroup_hm = "P 43 21 2"
model, chain = gemmi.Model("1"), gemmi.Chain("A")
for n in range(2000):
    el = ["C", "C", "C", "N", "O", "O", "S"][n % 7]
    res = gemmi.Residue()
    res.name, res.seqid = "UNK", gemmi.SeqId(n + 1, " ")
    a = gemmi.Atom()
    a.name, a.element = el, gemmi.Element(el)
    a.pos = st.cell.orthogonalize(gemmi.Fractional(*rng.random(3)))
    a.occ = float(round(rng.uniform(0.5, 1.0), 2))
    a.b_iso = float(round(rng.uniform(8, 30), 2))
    if n % 2:
        u = a.b_iso / (8 * math.pi**2)
        a.aniso = gemmi.SMat33f(u, 1.1 * u, 0.9 * u, 0.05 * u, 0.0, -0.03 * u)
    res.add_atom(a)
    chain.add_residue(res)
model.add_chain(chain)
st.add_model(model)
work = tempfile.mkdtemp()
pdb = os.path.join(work, "m.pdb")
st.write_pdb(pdb)

env = dict(os.environ, RAYON_NUM_THREADS=threads)
times = []
for run in range(3):
    out = os.path.join(work, f"f{run}.hkl")
    t = time.perf_counter()
    subprocess.run([exe, "sf", "-model", pdb, "-dmin", str(dmin), "-hkl", out], check=True,
                   capture_output=True, env=env)
    times.append(time.perf_counter() - t)
n_ours = sum(1 for _ in open(out))
print(f"nanobragg sf ({threads} threads): {min(times):.3f} s, {n_ours} reflections (full sphere)")

xs = iotbx.pdb.input(file_name=pdb).xray_structure_simple()
xs.scattering_type_registry(table="it1992")
t = time.perf_counter()
f = xs.structure_factors(d_min=dmin, algorithm="direct").f_calc()
t_cctbx = time.perf_counter() - t
print(f"cctbx direct (1 thread): {t_cctbx:.3f} s, {f.size()} reflections (asymmetric unit)")

st2 = gemmi.read_structure(pdb)
calc = gemmi.StructureFactorCalculatorX(st2.cell)
hkls = [list(h) for h in f.indices()]
t = time.perf_counter()
for h in hkls:
    calc.calculate_sf_from_model(st2[0], h)
t_gemmi = time.perf_counter() - t
print(f"gemmi direct (1 thread): {t_gemmi:.3f} s, {len(hkls)} reflections (asymmetric unit)")
print(f"cctbx / nanobragg: {t_cctbx / min(times):.1f}x, gemmi / nanobragg: {t_gemmi / min(times):.1f}x")
