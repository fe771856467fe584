"""`nanobragg sf` against gemmi and cctbx: structure factors of one model,
by direct summation with the IT92 form factors, compared reflection by
reflection.

Each model is random (fixed seed): C, N, O, S and two Fe atoms, partial
occupancies, half the atoms anisotropic. It is written by gemmi as PDB and
as mmCIF; nanobragg reads the file, gemmi (`StructureFactorCalculatorX`)
and cctbx (`iotbx.pdb` to an `xray.structure`, `algorithm="direct"`) read
the same PDB. Fe has f′ = −7.5 and f″ = 3.9 (about its K edge): all three
take f′; gemmi has no f″, so F(+h) and F(−h) are compared with cctbx.

Criteria: |F| within 1e-4 relative on at least 99.9 % of the reflections,
and the phase within 0.01° where |F| is above 1 % of the mean |F|.
"""

import math
import os
import pathlib
import subprocess

import numpy as np
import pytest

# cctbx's modules before gemmi's: the other order crashes the interpreter
# (cctbx-base 2025.11 with gemmi 0.7.5)
cctbx = pytest.importorskip("cctbx")
from cctbx.eltbx import xray_scattering  # noqa: E402,F401
import iotbx.pdb  # noqa: E402
gemmi = pytest.importorskip("gemmi")

ROOT = pathlib.Path(__file__).resolve().parents[2]
FP, FDP = -7.5, 3.9


def exe():
    if os.environ.get("NANOBRAGG_EXE"):
        return os.environ["NANOBRAGG_EXE"]
    built = [ROOT / "target" / p / "nanobragg" for p in ("release", "debug")]
    built = [p for p in built if p.exists()]
    if not built:
        pytest.skip("no nanobragg executable built (cargo build)")
    return str(max(built, key=lambda p: p.stat().st_mtime))


# (space group as the PDB writes it, cell)
MODELS = {
    "P1": ("P 1", (23.0, 27.0, 31.0, 80.0, 95.0, 105.0)),
    "P212121": ("P 21 21 21", (25.0, 31.0, 37.0, 90.0, 90.0, 90.0)),
    "P6122": ("P 61 2 2", (30.0, 30.0, 45.0, 90.0, 90.0, 120.0)),
    # C2 in a non-standard setting
    "I121": ("I 1 2 1", (40.0, 25.0, 30.0, 90.0, 110.0, 90.0)),
}


def make_structure(group, cell, seed):
    rng = np.random.default_rng(seed)
    st = gemmi.Structure()
    st.cell = gemmi.UnitCell(*cell)
    st.spacegroup_hm = group
    model = gemmi.Model("1")
    chain = gemmi.Chain("A")
    elements = ["C"] * 14 + ["N"] * 5 + ["O"] * 6 + ["S"] * 2 + ["Fe"] * 2
    for n, el in enumerate(elements):
        res = gemmi.Residue()
        res.name = "FES" if el == "Fe" else "UNK"
        res.seqid = gemmi.SeqId(n + 1, " ")
        atom = gemmi.Atom()
        atom.name = f"{el.upper()}{n % 10}"
        atom.element = gemmi.Element(el)
        frac = gemmi.Fractional(*rng.random(3))
        atom.pos = st.cell.orthogonalize(frac)
        atom.occ = float(round(rng.uniform(0.3, 1.0), 2))
        b = float(round(rng.uniform(5.0, 40.0), 2))
        atom.b_iso = b
        if n % 2 == 0:
            u = b / (8 * math.pi**2)
            d = rng.uniform(-0.25, 0.25, 6) * u
            # diagonal dominant: positive definite
            atom.aniso = gemmi.SMat33f(
                round(u + d[0], 4), round(u + d[1], 4), round(u + d[2], 4),
                round(0.3 * d[3], 4), round(0.3 * d[4], 4), round(0.3 * d[5], 4))
        res.add_atom(atom)
        chain.add_residue(res)
    model.add_chain(chain)
    st.add_model(model)
    st.setup_entities()
    return st


def ours(tmp_path, path, dmin):
    out = tmp_path / "ours.hkl"
    cmd = [exe(), "sf", "-model", str(path), "-dmin", str(dmin), "-hkl", str(out),
           "-phases", "-anomalous", "Fe", str(FP), str(FDP)]
    subprocess.run(cmd, check=True, capture_output=True)
    table = np.loadtxt(out)
    return {(int(h), int(k), int(l)): (f, p) for h, k, l, f, p in table}


def ours_without_fdp(tmp_path, path, dmin):
    out = tmp_path / "ours_fp.hkl"
    cmd = [exe(), "sf", "-model", str(path), "-dmin", str(dmin), "-hkl", str(out),
           "-phases", "-anomalous", "Fe", str(FP), "0"]
    subprocess.run(cmd, check=True, capture_output=True)
    table = np.loadtxt(out)
    return {(int(h), int(k), int(l)): (f, p) for h, k, l, f, p in table}


def compare(name, ours_map, theirs):
    """theirs: list of ((h, k, l), complex F). Returns (worst |F| rel, share
    within 1e-4, worst phase error in degrees over the strong ones)."""
    mean = np.mean([abs(f) for _, f in theirs])
    rel, phase = [], []
    missing = 0
    for hkl, f in theirs:
        if hkl not in ours_map:
            missing += 1
            continue
        a, p = ours_map[hkl]
        if abs(f) < 1e-9 * mean:
            # systematically absent (only rounding left of F): ours is 0
            assert a == 0.0, f"{name}: {hkl} is absent, ours {a}"
            continue
        rel.append(abs(a - abs(f)) / max(abs(f), 1e-30))
        if abs(f) > 0.01 * mean:
            d = (p - math.degrees(math.atan2(f.imag, f.real)) + 180.0) % 360.0 - 180.0
            phase.append(abs(d))
    rel = np.array(rel)
    assert missing <= 0.001 * len(theirs), f"{name}: {missing} of {len(theirs)} reflections missing"
    good = np.mean(rel <= 1e-4)
    print(f"{name}: {len(theirs)} reflections, |F| worst rel {rel.max():.2e}, "
          f"{100 * good:.3f} % within 1e-4, phase worst {max(phase):.2e} deg")
    assert good >= 0.999, f"{name}: only {100 * good:.3f} % of |F| within 1e-4 (worst {rel.max():.2e})"
    assert max(phase) <= 0.01, f"{name}: phase off by {max(phase):.3e} deg"
    return rel.max(), good, max(phase)


def cctbx_f(pdb_path, dmin):
    xs = iotbx.pdb.input(file_name=str(pdb_path)).xray_structure_simple()
    xs.scattering_type_registry(table="it1992")
    for sc in xs.scatterers():
        if sc.scattering_type.strip().capitalize() == "Fe":
            sc.fp, sc.fdp = FP, FDP
    f = xs.structure_factors(d_min=dmin, algorithm="direct", anomalous_flag=True).f_calc()
    return list(zip(f.indices(), f.data()))


def gemmi_f(st, hkls):
    calc = gemmi.StructureFactorCalculatorX(st.cell)
    calc.addends.set(gemmi.Element("Fe"), FP)
    return [(hkl, calc.calculate_sf_from_model(st[0], list(hkl))) for hkl in hkls]


@pytest.mark.parametrize("dmin", [2.0, 1.5])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_structure_factors_match_gemmi_and_cctbx(tmp_path, name, dmin):
    group, cell = MODELS[name]
    st = make_structure(group, cell, seed=sorted(MODELS).index(name) + 1)
    pdb = tmp_path / "m.pdb"
    st.write_pdb(str(pdb))
    cif = tmp_path / "m.cif"
    st.make_mmcif_document().write_file(str(cif))

    mine = ours(tmp_path, pdb, dmin)

    # cctbx: f′ and f″, Friedel mates apart
    theirs = cctbx_f(pdb, dmin)
    compare(f"{name} {dmin} Å cctbx (f', f'')", mine, theirs)
    friedel = [hkl for hkl, _ in theirs if tuple(-x for x in hkl) in dict(theirs)]
    assert any(abs(mine[h][0] - mine[tuple(-x for x in h)][0]) > 1e-3 * mine[h][0]
               for h in friedel if mine[h][0] > 0), "no anomalous difference"

    # gemmi: f′ only, on a spread of reflections of the whole sphere
    # (gemmi reads the same PDB: its coordinates and U are rounded as
    # the file writes them)
    # the mmCIF keeps more digits than the PDB: it is compared on its own
    for path in (pdb, cif):
        mine_fp = ours_without_fdp(tmp_path, path, dmin)
        hkls = sorted(mine_fp)[:: max(1, len(mine_fp) // 6000)]
        compare(f"{name} {dmin} Å gemmi (f') {path.suffix}", mine_fp,
                gemmi_f(gemmi.read_structure(str(path)), hkls))
