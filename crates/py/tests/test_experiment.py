"""The experiment as objects: built by keywords, changed by attribute, the
same images as the command line, and its command line back."""

import copy
import pathlib
import pickle
import runpy
import subprocess
import sys

import numpy as np
import pytest

import nanobragg as nb

ARGS = ("-default_F 100 -cell 70 80 90 80 95 100 -misset 3 -2 5 -lambda 1.1 -N 4 "
        "-distance 90 -detpixels 64 -pixel 0.3 -Xbeam 9.1 -Ybeam 10.2 -mosaic 0.2 "
        "-mosaic_domains 3 -polar 0.9 -oversample 2 -seed 5")


def objects():
    """The experiment of ARGS, from objects."""
    return nb.Experiment(
        beam=nb.Beam(lambda_a=1.1, kahn_factor=0.9),
        crystal=nb.Crystal(cell=(70, 80, 90, 80, 95, 100), misset=(3, -2, 5), N=4,
                           default_F=100, mosaic_deg=0.2, mosaic_domains=3),
        detector=nb.Detector(distance_mm=90, fpixels=64, spixels=64, pixel_mm=0.3,
                             xbeam_mm=9.1, ybeam_mm=10.2),
        oversample=2, seed=5)


def test_objects_render_what_the_command_line_renders():
    e, a = objects(), nb.from_args(ARGS)
    assert e.beam == a.beam and e.crystal == a.crystal and e.detector == a.detector
    assert np.array_equal(nb.simulate(e), nb.simulate(a))
    assert np.array_equal(nb.simulate(e, dtype="exact"), nb.simulate(a, dtype="exact"))
    # from_args builds the same objects, and to_args gives the command line back
    assert sorted(e.to_args()) == sorted(ARGS.split()), e.to_args()
    assert nb.from_args(e.to_args()).to_args() == e.to_args()


def test_changing_a_part_changes_the_render_without_a_command_line():
    e = objects()
    before = nb.simulate(e)
    crystal = e.crystal
    crystal.cell_a = 71            # the part is shared: the experiment sees it
    assert e.crystal.cell == (71.0, 80.0, 90.0, 80.0, 95.0, 100.0) and e["cell_a"] == 71.0
    after = nb.simulate(e)
    want = nb.simulate(nb.from_args(ARGS.replace("-cell 70", "-cell 71")))
    assert np.array_equal(after, want) and not np.array_equal(after, before)
    # a part replaced, or a value set by parameter name, lands in the parts
    e.beam = nb.Beam(lambda_a=1.0, kahn_factor=0.9)
    e["distance"] = 95.0
    assert e.detector.distance_mm == 95.0 and e.beam.lambda_a == 1.0
    want = nb.from_args(ARGS.replace("-cell 70", "-cell 71").replace("-lambda 1.1", "-lambda 1")
                        .replace("-distance 90", "-distance 95"))
    assert np.array_equal(nb.simulate(e), nb.simulate(want))


def test_attributes_are_the_config_fields_and_refuse_what_they_cannot_hold():
    c = nb.Crystal(cell=(70, 80, 90, 80, 95, 100), N=(3, 4, 5))
    assert c.N == (3.0, 4.0, 5.0) and c.Nb == 4.0 and c.shape == "square" and c.misset is None
    c.N = 6
    c.shape = "gauss"
    c.misset = "random"
    assert c.N == 6.0 and (c.Na, c.Nc) == (6.0, 6.0) and c.shape == "gauss"
    assert c.misset == "random"
    d = nb.Detector(attenuation_um=float("inf"), convention="xds")
    assert d.attenuation_um == float("inf") and d.convention == "xds"
    with pytest.raises(AttributeError, match='did you mean "cell_a"'):
        c.cel_a = 3
    with pytest.raises(TypeError, match='Beam\\(\\): .*"lamda_a".*did you mean "lambda_a"'):
        nb.Beam(lamda_a=1)
    with pytest.raises(ValueError, match="lambda_a: NaN is not a finite number"):
        nb.Beam(lambda_a=float("nan"))
    with pytest.raises(ValueError, match="cell: 6 values, not 3"):
        c.cell = (1, 2, 3)
    with pytest.raises(TypeError, match="fpixels: a whole number"):
        d.fpixels = 6.5
    with pytest.raises(ValueError, match='shape: "cube": one of'):
        c.shape = "cube"
    with pytest.raises(TypeError, match="Experiment.beam: a nanobragg.Beam"):
        objects().beam = c
    # a value the physics refuses is found before the render, named by its flag
    e = objects()
    e.detector.pixel_mm = -1.0
    with pytest.raises(nb.Error, match="pixel"):
        nb.simulate(e)
    assert "lambda_a: wavelength" in nb.Beam.help()


def test_repr_shows_the_values():
    text = repr(objects())
    for part in ["nanobragg.Beam(lambda_a=1.1", "kahn_factor=0.9", "cell=(70.0, 80.0, 90.0",
                 "N=4.0", "misset=(3.0, -2.0, 5.0)", "xbeam_mm=9.1", "oversample=2", "seed=5"]:
        assert part in text, text


def test_what_no_command_line_holds_is_said():
    e = objects()
    e.crystal.Na = 4.5             # continuous in the engine, whole on the command line
    with pytest.raises(nb.Error, match="-Na 4.5: the flag takes a whole number"):
        e.to_args()
    nb.simulate(e)                 # it renders all the same
    e = objects()
    e.set_structure_factors([[1, 0, 0], [0, 1, 0]], [10.0, 20.0])
    # the amplitudes are no flag's: the command line leaves them out, and says so
    # through set_flags, pickle and refine, which keep them
    args = e.to_args()
    e.set_flags("-phisteps 2 -osc 0.1")
    assert e.crystal.phisteps == 2
    again = pickle.loads(pickle.dumps(e))
    assert np.array_equal(nb.simulate(again), nb.simulate(e))
    assert "-phisteps" not in args


def test_copies_are_deep_and_pickles_rebuild_the_objects():
    e = objects()
    for other in [copy.copy(e), copy.deepcopy(e), pickle.loads(pickle.dumps(e))]:
        assert np.array_equal(nb.simulate(other), nb.simulate(e))
        other.crystal.cell_a = 75
        assert e.crystal.cell_a == 70.0


def test_panels_from_a_geometry_file(tmp_path):
    geom = tmp_path / "two.geom"
    text = "clen = 0.06\nres = 10000\nphoton_energy = 12398.42 eV\n"
    for k, cx in enumerate([-66.0, 2.0]):
        text += (f"m{k}/min_fs = 0\nm{k}/max_fs = 63\nm{k}/min_ss = {64 * k}\n"
                 f"m{k}/max_ss = {64 * k + 63}\nm{k}/corner_x = {cx}\nm{k}/corner_y = -32\n"
                 f"m{k}/fs = +1x +0y +0z\nm{k}/ss = +0x +1y +0z\n")
    geom.write_text(text)
    rest = "-default_F 200 -cell 48 48 61 90 90 90 -N 10 -oversample 1"
    a = nb.from_args(f"-geom {geom} {rest}")
    d = nb.Detector.from_geom(geom)
    assert d == a.detector and len(d.panels) == 2 and d.panels[1].fpixels == 64
    e = nb.Experiment(beam=a.beam, crystal=nb.Crystal(cell=(48, 48, 61, 90, 90, 90), N=10,
                                                      default_F=200),
                      detector=d, oversample=1)
    assert np.array_equal(nb.simulate(e), nb.simulate(a))
    assert e.to_args()[:2] == ["-geom", str(geom)]
    # panels are values: a moved one is a new Panel, put back as a list
    p = d.panels[1]
    with pytest.raises(AttributeError):
        p.origin_mm = (0, 0, 0)
    moved = p.replace(origin_mm=tuple(np.add(p.origin_mm, (0.1, 0, 0))))
    e.detector.panels = [d.panels[0], moved]
    assert e.detector.panels[1] == moved and nb.simulate(e).shape == (128, 64)
    assert not np.array_equal(nb.simulate(e), nb.simulate(a))
    with pytest.raises(nb.Error, match="panels"):
        e.to_args()


def test_the_functions_take_experiments_built_from_objects():
    e = objects()
    image, d = nb.jacobian(e, ["distance", "cell_a"])
    p = nb.Params(e, ["distance", "cell_a"])
    assert np.allclose(p.image(p.start), image, rtol=1e-6, atol=1e-9)
    observed = nb.simulate(nb.from_args(ARGS.replace("-distance 90", "-distance 90.4")))
    r = nb.refine(e, observed, ["distance"])
    assert abs(r.values[0] - 90.4) < 1e-3 and abs(r.experiment.detector.distance_mm - 90.4) < 1e-3
    assert e.detector.distance_mm == 90.0
    assert np.allclose(nb.simulate(r.experiment), observed, rtol=1e-4, atol=1e-3)


def test_the_example_runs():
    root = pathlib.Path(__file__).resolve().parents[3]
    runpy.run_path(str(root / "examples" / "experiment_objects.py"), run_name="__main__")


def test_set_flags_keeps_the_parts_and_the_settings():
    e = nb.from_args(ARGS + " -adc 10 -scale 2 -threads 3")
    crystal = e.crystal
    e.set_flags("-phisteps 2 -osc 0.1")
    assert crystal.phisteps == 2 and e.crystal is not None and e.crystal.phisteps == 2
    crystal.cell_a = 72             # still the experiment's own part
    assert e["cell_a"] == 72.0
    ints = nb.render(e).int_image()
    want = nb.render(nb.from_args(ARGS.replace("-cell 70", "-cell 72")
                                  + " -adc 10 -scale 2 -phisteps 2 -osc 0.1")).int_image()
    assert np.array_equal(ints, want)


def test_pickles_hold_what_no_command_line_does(tmp_path):
    e = objects()
    e.crystal.Na = 4.5
    e.beam.spectrum = [(1.1, 1.0), (1.12, 0.5)]
    assert isinstance(e.beam.spectrum, tuple)       # a value: append would change nothing
    again = pickle.loads(pickle.dumps(e))
    assert again.crystal.Na == 4.5 and again.beam.spectrum == ((1.1, 1.0), (1.12, 0.5))
    assert np.array_equal(nb.simulate(again), nb.simulate(e))


def test_a_vector_selects_the_custom_convention_as_its_flag_does():
    d = nb.Detector(convention="mosflm")
    d.spindle = (0, 1, 0)
    assert d.convention == "custom"
    want = nb.from_args("-spindle_axis 0 1 0").detector
    assert d.spindle == want.spindle and d.convention == want.convention


def test_a_left_over_fdump_is_named(tmp_path, monkeypatch):
    hkl = tmp_path / "one.hkl"
    hkl.write_text("1 0 0 10\n0 1 0 20\n")
    # the command writes Fdump.bin, which a later command line without -hkl reads
    out = subprocess.run([sys.executable, "-m", "nanobragg", "-hkl", str(hkl), "-cell", "40", "40",
                          "40", "90", "90", "90", "-N", "2", "-detpixels", "16", "-floatfile",
                          "f.bin"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0 and (tmp_path / "Fdump.bin").exists(), out.stderr
    monkeypatch.chdir(tmp_path)
    with pytest.raises(nb.Error, match="reads the structure factors of Fdump.bin"):
        objects().to_args()
