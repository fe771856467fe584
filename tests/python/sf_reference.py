"""Reference structure factors for test_structure_factors.py, run in a process
of its own: cctbx's boost extensions crash when loaded after some of the
other readers' extension modules (and gemmi before iotbx.pdb), so the test
process imports neither.

    python sf_reference.py make GROUP A B C AL BE GA SEED DIR   (writes m.pdb, m.cif)
    python sf_reference.py cctbx PDB DMIN OUT.npy
    python sf_reference.py gemmi MODEL HKLS.npy OUT.npy
OUT.npy rows: h, k, l, Re F, Im F. Fe has f′ = FP, f″ = FDP (gemmi: f′ only).
"""

import math
import sys

import numpy as np

FP, FDP = -7.5, 3.9


def make_structure(group, cell, seed):
    import gemmi

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



def cctbx_f(pdb_path, dmin):
    import iotbx.pdb
    from cctbx.eltbx import xray_scattering  # noqa: F401

    xs = iotbx.pdb.input(file_name=str(pdb_path)).xray_structure_simple()
    xs.scattering_type_registry(table="it1992")
    for sc in xs.scatterers():
        if sc.scattering_type.strip().capitalize() == "Fe":
            sc.fp, sc.fdp = FP, FDP
    f = xs.structure_factors(d_min=dmin, algorithm="direct", anomalous_flag=True).f_calc()
    return [(h, complex(v)) for h, v in zip(f.indices(), f.data())]


def gemmi_f(path, hkls):
    import gemmi

    st = gemmi.read_structure(str(path))
    calc = gemmi.StructureFactorCalculatorX(st.cell)
    calc.addends.set(gemmi.Element("Fe"), FP)
    return [(tuple(h), calc.calculate_sf_from_model(st[0], [int(x) for x in h])) for h in hkls]


def save(out, rows):
    np.save(out, np.array([[*h, f.real, f.imag] for h, f in rows], dtype=float))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "make":
        group = sys.argv[2]
        cell = tuple(float(x) for x in sys.argv[3:9])
        seed, out = int(sys.argv[9]), sys.argv[10]
        st = make_structure(group, cell, seed)
        st.write_pdb(f"{out}/m.pdb")
        st.make_mmcif_document().write_file(f"{out}/m.cif")
    elif what == "cctbx":
        save(sys.argv[4], cctbx_f(sys.argv[2], float(sys.argv[3])))
    elif what == "gemmi":
        save(sys.argv[4], gemmi_f(sys.argv[2], np.load(sys.argv[3]).astype(int)))
