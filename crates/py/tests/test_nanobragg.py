"""The Python package against the command line and against analytic facts."""

import os
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import nanobragg

MODEL = ("-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 "
         "-distance 100 -detpixels 64 -pixel 0.4")


def cli(args, cwd):
    """Runs the wheel's `nanobragg` command (through this interpreter)."""
    cmd = [sys.executable, "-m", "nanobragg"] + args.split()
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def test_simulate_is_the_command_lines_float_image(tmp_path):
    model = nanobragg.from_args(MODEL)
    for dtype, flag in [("float64", ""), ("float32", " -dtype float32"), ("exact", " -exact")]:
        out = cli(MODEL + flag + " -floatfile f.bin -nonoise -nopgm", tmp_path)
        assert out.returncode == 0, out.stderr
        want = np.fromfile(tmp_path / "f.bin", dtype="<f4").reshape(64, 64)
        got = nanobragg.simulate(model, dtype=dtype)
        assert got.dtype == np.float32 and got.shape == (64, 64) == model.shape
        assert np.array_equal(got, want), dtype
        assert got.max() > 0


def test_a_list_of_words_is_the_same_model():
    a = nanobragg.simulate(nanobragg.from_args(MODEL))
    b = nanobragg.simulate(nanobragg.from_args(MODEL.split()))
    assert np.array_equal(a, b)
    # the command line back: the flags that differ from the defaults
    # (-distance 100 is one), in the flags' order
    args = nanobragg.from_args(MODEL).to_args()
    assert set(args) <= set(MODEL.split()) and "-distance" not in args, args
    assert np.array_equal(nanobragg.simulate(nanobragg.from_args(args)), a)


def test_threads_do_not_change_the_image():
    model = nanobragg.from_args(MODEL)
    one = nanobragg.simulate(model, threads=1)
    two = nanobragg.simulate(model, threads=2)
    assert np.array_equal(one, two)


def test_bad_input_raises_with_the_command_lines_message():
    with pytest.raises(nanobragg.Error, match="-bogus"):
        nanobragg.from_args(MODEL + " -bogus 3")
    with pytest.raises(nanobragg.Error, match="-hkl"):
        nanobragg.simulate(nanobragg.from_args(MODEL + " -hkl /nonexistent/x.hkl"))
    model = nanobragg.from_args(MODEL)
    with pytest.raises(nanobragg.Error, match="dtype"):
        nanobragg.simulate(model, dtype="float16")
    with pytest.raises(nanobragg.Error, match="nope"):
        nanobragg.jacobian(model, ["nope"])


def test_jacobian_matches_finite_differences():
    model = nanobragg.from_args(MODEL)
    image, d = nanobragg.jacobian(model, ["distance", "lambda"])
    assert d.shape == (2, 64, 64)
    assert np.allclose(image, nanobragg.simulate(model, dtype="exact"), rtol=1e-6)
    for i, (flag, value, h) in enumerate([("-distance", 100.0, 0.05), ("-lambda", 6.2, 1e-3)]):
        def render(v):
            args = MODEL.replace(f"{flag} {value:g}", f"{flag} {v!r}")
            assert args != MODEL
            return nanobragg.simulate(nanobragg.from_args(args), dtype="exact").astype(np.float64)
        fd = (render(value + h) - render(value - h)) / (2 * h)
        err = np.linalg.norm(d[i] - fd) / np.linalg.norm(fd)
        # the images are float32: steps large enough to leave their rounding
        assert err < 1e-4, (flag, err)
    # the misset angles are the -misset flag's, as for Params and torch (far
    # from 0, where turning about the lab axes would differ from the angle)
    model = nanobragg.from_args(MODEL + " -misset 30 40 50")
    p = nanobragg.Params(model, ["misset_x", "misset_y", "misset_z"])
    _, d = nanobragg.jacobian(model, ["misset_x", "misset_y", "misset_z"])
    for i in range(3):
        e = np.zeros(3)
        e[i] = 1e-3
        fd = (p.image(p.start + e) - p.image(p.start - e)) / 2e-3
        assert np.linalg.norm(d[i] - fd) < 1e-4 * np.linalg.norm(fd), i


def test_the_gil_is_released_while_rendering():
    model = nanobragg.from_args(MODEL.replace("-detpixels 64", "-detpixels 1024 -oversample 2"))
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.001)

    t = threading.Thread(target=tick)
    t.start()
    nanobragg.simulate(model, threads=1)
    done.set()
    t.join()
    # a render holding the GIL would leave the other thread one tick at most
    assert len(ticks) > 5, len(ticks)


def test_the_command_is_installed(tmp_path):
    out = cli("-h", tmp_path)
    assert out.returncode == 0 and "-floatfile" in out.stdout + out.stderr
    out = cli(MODEL + " -bogus", tmp_path)
    assert out.returncode != 0 and "-bogus" in out.stderr


def test_two_threads_render_at_once():
    """Two Python threads render at once (the GIL is released while the
    engine runs): both complete, and each gives the image one render alone
    gives. How much sooner they finish is measured by bench/bench.py."""
    model = nanobragg.from_args(MODEL.replace("-detpixels 64", "-detpixels 256 -oversample 2"))
    alone = nanobragg.simulate(model, threads=1)
    got = [None, None]

    def run(k):
        got[k] = nanobragg.simulate(model, threads=1)

    workers = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for image in got:
        assert image is not None
        np.testing.assert_array_equal(image, alone)


CTRL_C = """
import _thread, threading, nanobragg
from nanobragg import _nanobragg
big = nanobragg.from_args("-default_F 100 -cell 100 100 100 90 90 90 -lambda 1 -N 5 "
                          "-distance 100 -detpixels 2048 -oversample 4 "
                          "-mosaic 0.1 -mosaic_domains 50")
threading.Timer(0.2, _thread.interrupt_main).start()
try:
    nanobragg.{call}
    print("ran to the end")
except KeyboardInterrupt:
    print("stopped", _nanobragg._interrupted_rows())
small = nanobragg.from_args("{model}")
print("after", float(nanobragg.simulate(small).sum()))
"""


@pytest.mark.parametrize("call", ["simulate(big)", "render(big)",
                                  "Params(big, ['distance']).image([100.0])"])
def test_ctrl_c_stops_the_render_it_interrupts(call):
    """Ctrl-C (here `_thread.interrupt_main`, as the terminal's SIGINT
    reaches Python) during the first render of a fresh interpreter raises
    KeyboardInterrupt, and the render stopped early: rows were left out
    (the work done, not the clock). A later render runs whole."""
    code = CTRL_C.format(call=call, model=MODEL)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    stopped = lines[0].split()
    assert stopped[0] == "stopped", out.stdout + out.stderr
    assert 0 < int(stopped[1]), out.stdout
    want = float(nanobragg.simulate(nanobragg.from_args(MODEL)).sum())
    assert lines[1] == f"after {want}", out.stdout


def test_loss_and_its_gradient():
    model = nanobragg.from_args(MODEL)
    p = nanobragg.Params(model, ["distance", "lambda"])
    observed = nanobragg.simulate(model)
    at = p.start + np.array([0.3, 0.0])
    ev = p.loss(at, observed, loss="sse")
    assert ev["value"] > 0 and ev["pixels"] == 64 * 64
    h = 1e-4
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        fd = (p.loss(at + e, observed)["value"] - p.loss(at - e, observed)["value"]) / (2 * h)
        assert abs(ev["gradient"][i] - fd) <= 1e-4 * abs(fd) + 1e-6 * ev["value"], (i, fd)
    with pytest.raises(nanobragg.Error, match="shape"):
        p.loss(at, observed[:10])


def smv_pixels(path, shape):
    data = path.read_bytes()
    header = int(re.search(rb"HEADER_BYTES=\s*(\d+)", data).group(1))
    return np.frombuffer(data[header:], dtype="<u2").reshape(shape)


def test_render_gives_the_command_lines_int_and_noise_images_and_statistics(tmp_path):
    args = MODEL + " -seed 7 -roi 3 60 5 50"
    out = cli(args + " -floatfile f.bin -intfile i.img -noisefile n.img -nopgm", tmp_path)
    assert out.returncode == 0, out.stderr
    image = nanobragg.render(nanobragg.from_args(args))
    assert np.array_equal(image.float, np.fromfile(tmp_path / "f.bin", "<f4").reshape(64, 64))
    assert np.array_equal(image.int_image(), smv_pixels(tmp_path / "i.img", (64, 64)))
    noise, photons, overloads = image.noise_image(noise_rng="c")
    assert np.array_equal(noise, smv_pixels(tmp_path / "n.img", (64, 64)))
    assert f"{photons:.0f} photons on noise image ({overloads} overloads)" in out.stdout
    # the default is the parallel stream, the command line's -noise_rng parallel
    out = cli(args + " -floatfile f.bin -noisefile p.img -nopgm -noise_rng parallel", tmp_path)
    parallel = image.noise_image()
    assert np.array_equal(parallel[0], smv_pixels(tmp_path / "p.img", (64, 64)))
    assert f"{parallel[1]:.0f} photons on noise image ({parallel[2]} overloads)" in out.stdout
    assert not np.array_equal(parallel[0], noise)
    with pytest.raises(nanobragg.Error, match="noise_rng"):
        image.noise_image(noise_rng="philox")
    s = image.stats
    assert f"mean= {s['mean']:.6g} rms= {s['rms']:.6g} rmsd= {s['rmsd']:.6g}" in out.stdout
    assert s["pixels"] == 58 * 46 and 0 < image.seconds
    # the brightest pixel as (slow, fast), an index into the arrays (misset:
    # the pixel on the other side of the diagonal is not as bright)
    r = nanobragg.render(nanobragg.from_args(MODEL + " -misset 5 10 15"))
    misset, s = r.float, r.stats
    assert misset[s["max_pixel"]] == s["max_I"] == misset.max() > misset.T[s["max_pixel"]]
    assert not np.array_equal(image.noise_image(seed=8)[0], noise)


def test_the_parameters_a_model_has():
    names = nanobragg.from_args(MODEL).parameters
    assert {"distance", "cell_a", "lambda", "misset_x", "Na"} <= set(names)
    assert "mosaic" not in names  # no -mosaic spread to move


def test_a_spectrum_is_the_weighted_sum_of_its_lines(tmp_path):
    spec = tmp_path / "beam.lam"
    spec.write_text("# wavelengths, weights\n6.2,0.25\n6.3,0.75\n")
    # (one oversample for all three: the automatic one differs with -spectrum)
    base = MODEL.replace("-lambda 6.2 ", "") + " -oversample 1"
    model = nanobragg.from_args(base + f" -spectrum {spec}")
    got = nanobragg.simulate(model, dtype="float64").astype(np.float64)
    lines = [nanobragg.simulate(nanobragg.from_args(base + f" -lambda {l}")).astype(np.float64)
             for l in (6.2, 6.3)]
    want = 0.25 * lines[0] + 0.75 * lines[1]
    assert np.allclose(got, want, rtol=1e-6, atol=0)
    names = model.parameters
    assert {"lambda_offset", "lambda_scale"} <= set(names) and "lambda" not in names
    model["lambda_offset"] = 0.1
    assert model["lambda_offset"] == 0.1


def test_refine_is_the_command_lines(tmp_path, capsys):
    truth = nanobragg.from_args(MODEL.replace("-distance 100", "-distance 100.3"))
    observed = nanobragg.simulate(truth)
    observed.tofile(tmp_path / "obs.bin")
    model = nanobragg.from_args(MODEL)
    r = nanobragg.refine(model, observed, ["distance", "lambda"])
    assert capsys.readouterr().out == ""
    # verbose: the lines go through Python's print (sys.stdout, which a
    # notebook shows), one per iteration after what is fitted
    nanobragg.refine(model, observed, ["distance", "lambda"], verbose=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("refining distance, lambda against") and "sse loss" in lines[0]
    assert sum(line.startswith("iteration") for line in lines) == len(r.history), lines
    assert r.params == ["distance", "lambda"] and r.units == ["mm", "Å"]
    assert abs(r.values[0] - 100.3) < 1e-4 and abs(r.values[1] - 6.2) < 1e-6, r
    assert r.final_loss < 1e-6 * r.start_loss and r.loss == "sse"
    assert r.history[0][0] == 0 and len(r.history) == r.iterations
    assert r.history[-1][1] <= r.history[0][1] < r.start_loss
    assert "-distance 100.3" in r.command_line and all(s is not None for s in r.standard_errors)
    out = subprocess.run([sys.executable, "-m", "nanobragg", "refine", "-observed", "obs.bin",
                          "-refine", "distance,lambda"] + MODEL.split(),
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"{r.values[0]:.10f}" in out.stdout
    # the command's refined command line and the binding's give one experiment
    printed = [line for line in out.stdout.splitlines() if line.startswith("nanobragg -")]
    assert len(printed) == 1, out.stdout
    assert (nanobragg.from_args(printed[0].split()[1:]).to_args()
            == nanobragg.from_args(r.command_line).to_args())
    # and the refined experiment holds the refined values themselves
    assert r.experiment["distance"] == r.values[0] and r.experiment["lambda"] == r.values[1]
    assert model["distance"] == 100.0, "the start is left as it was"
    with pytest.raises(nanobragg.Error, match="pixels"):
        nanobragg.refine(model, observed[:5], ["distance"])
    with pytest.raises(nanobragg.Error, match="mosaic"):
        nanobragg.refine(model, observed, ["mosaic"])


STILL = ("-default_F 200 -cell 48 48 61 90 90 90 -N 10 -lambda 1 -pixel 0.1 -detpixels 256 "
         "-distance 60 -oversample 1 -fluence 1e28 -misset 10 20 30 -Xbeam 12.8 -Ybeam 12.8")


def test_refine_says_whether_the_fit_explains_the_spots():
    observed = nanobragg.simulate(nanobragg.from_args(STILL))
    # 0.3 deg and 1.5 pixels off: the prefit on spot centroids brings it in
    start = nanobragg.from_args(STILL.replace("-misset 10 20 30", "-misset 10.3 19.7 30.3")
                                .replace("-Xbeam 12.8 -Ybeam 12.8", "-Xbeam 12.95 -Ybeam 12.65"))
    r = nanobragg.refine(start, observed, ["Xbeam", "Ybeam", "misset_x", "misset_y", "misset_z"])
    assert r.success and r.failed is None and r.spots >= 20 and r.explained == 1.0, r
    assert abs(r.values[2] - 10) < 1e-3 and abs(r.values[0] - 12.8) < 1e-3, r
    # a model that cannot reach the spots (wrong cell, only the distance refined) fails
    wrong = nanobragg.from_args(STILL.replace("-cell 48 48 61", "-cell 44 52 61"))
    r = nanobragg.refine(wrong, observed, ["distance"])
    assert not r.success and "explains" in r.failed and r.explained < 0.8, r
    assert "FAILED" in repr(r)


def test_the_cuda_device_renders_or_says_why_not():
    model = nanobragg.from_args(MODEL)
    try:
        gpu = nanobragg.simulate(model, device="cuda")
    except nanobragg.Error as e:
        assert "-device cuda" in str(e), e
        return
    cpu = nanobragg.simulate(model)
    assert np.abs(gpu - cpu).max() <= 1e-5 * cpu.max()


def test_any_flag_can_be_set_and_values_set_by_name_stay():
    model = nanobragg.from_args(MODEL)
    model["distance"] = 90.0
    model.set_flags("-oversample 2 -phisteps 2 -osc 0.1")
    want = nanobragg.from_args(MODEL.replace("-distance 100", "-distance 90")
                               + " -oversample 2 -phisteps 2 -osc 0.1")
    assert model["distance"] == 90.0 and model.to_args() == want.to_args()
    assert np.array_equal(nanobragg.simulate(model), nanobragg.simulate(want))
    with pytest.raises(nanobragg.Error, match="-bogus"):
        model.set_flags("-bogus 1")
    assert np.array_equal(nanobragg.simulate(model), nanobragg.simulate(want))


def test_bad_values_raise_and_leave_the_model_as_it_was():
    model = nanobragg.from_args(MODEL)
    before = nanobragg.simulate(model)
    with pytest.raises(nanobragg.Error, match="distance = NaN"):
        model["distance"] = float("nan")
    with pytest.raises(nanobragg.Error,
                       match=r"distance = -5.0: -distance: '-5.0' is not allowed \(must be > 0\)"):
        model["distance"] = -5.0
    # what the flags refuse (-fluence -1, -polar nan, -mosaic -1) is refused by name too
    with pytest.raises(nanobragg.Error, match=r"fluence = -1.0: .*must be >= 0"):
        model["fluence"] = -1.0
    with pytest.raises(nanobragg.Error, match="polar = NaN: -polar: 'NaN' is not a number"):
        model["polar"] = float("nan")
    with pytest.raises(nanobragg.Error, match="cell angles must be >= 0 and < 180"):
        model["cell_gamma"] = 180.0
    mosaic = nanobragg.from_args(MODEL + " -mosaic 0.1 -mosaic_domains 2")
    with pytest.raises(nanobragg.Error, match=r"mosaic = -1.0: -mosaic: .*must be >= 0"):
        mosaic["mosaic"] = -1.0
    assert mosaic["mosaic"] == 0.1
    assert np.array_equal(nanobragg.simulate(model), before)
    p = nanobragg.Params(model, ["distance", "cell_a"])
    with pytest.raises(nanobragg.Error, match="1 values for 2 parameters"):
        p.image(np.array([100.0]))
    with pytest.raises(nanobragg.Error, match="1 values for 2 parameters"):
        p.vjp(np.array([100.0]), np.ones(model.shape))
    with pytest.raises(nanobragg.Error, match="at least one"):
        nanobragg.refine(model, before, [])


def test_setting_a_value_reads_no_file(tmp_path):
    hkl = tmp_path / "a.hkl"
    hkl.write_text("1 0 0 30\n0 1 1 40\n")
    model = nanobragg.from_args(MODEL + f" -hkl {hkl}")
    hkl.rename(tmp_path / "moved.hkl")
    model["distance"] = 101.0
    assert model["distance"] == 101.0 and nanobragg.simulate(model).max() > 0


def test_arrays_of_any_numeric_type_are_taken():
    model = nanobragg.from_args(MODEL + " -fluence 1e26 -misset 5 10 15")
    p = nanobragg.Params(model, ["distance", "cell_a"])
    x = np.array(p.start)
    # values as a list or float32; an observation as the package's own
    # uint16 noise image or in float64, a mask of 0 and 1
    assert np.array_equal(p.image([100, 100]), p.image(x))
    assert np.array_equal(p.image(x.astype(np.float32)), p.image(x))
    noisy = nanobragg.render(model).noise_image(seed=1)[0]
    assert noisy.dtype == np.uint16
    want = p.loss(x, noisy.astype(np.float32), loss="poisson")
    assert p.loss(x, noisy, loss="poisson")["value"] == want["value"]
    assert p.loss(x, noisy.astype(np.float64), loss="poisson")["value"] == want["value"]
    skip = np.zeros(model.shape, dtype=np.int64)
    skip[:8] = 1
    assert (p.loss(x, noisy, skip=skip)["value"]
            == p.loss(x, noisy, skip=skip.astype(bool))["value"])
    r = nanobragg.refine(model, noisy, ["distance"], maxiter=3, prefit=False)
    assert r.loss == "poisson"
    # Miller indices as int32 or whole floats; not as fractions
    hkl = np.array([[0, 0, 1], [1, 2, 3]])
    f = np.array([10.0, 20.0])
    a, b = nanobragg.from_args(MODEL), nanobragg.from_args(MODEL)
    a.set_structure_factors(hkl, f)
    b.set_structure_factors(hkl.astype(np.int32), f.astype(np.float32))
    assert np.array_equal(nanobragg.simulate(a), nanobragg.simulate(b))
    b.set_structure_factors(hkl.astype(float), [10, 20])
    assert np.array_equal(nanobragg.simulate(a), nanobragg.simulate(b))
    with pytest.raises(nanobragg.Error, match="hkl holds 0.5, not a Miller index"):
        b.set_structure_factors(hkl + 0.5, f)


def test_a_model_copies_and_pickles_with_its_values_and_arrays():
    import copy
    import pickle
    model = nanobragg.from_args(MODEL)
    model["distance"] = 101.5
    model.set_structure_factors(np.array([[1, 0, 0], [0, 1, 1]]), np.array([30.0, 40.0]))
    want = nanobragg.simulate(model)
    assert not np.array_equal(want, nanobragg.simulate(nanobragg.from_args(MODEL)))
    for other in [copy.copy(model), copy.deepcopy(model), pickle.loads(pickle.dumps(model))]:
        assert np.array_equal(nanobragg.simulate(other), want) and other["distance"] == 101.5
        assert repr(other) == repr(model)
    # a copy is its own model
    twin = copy.copy(model)
    twin["distance"] = 99.0
    assert model["distance"] == 101.5


def test_params_pickle_with_their_model_names_and_F():
    import pickle
    model = nanobragg.from_args(MODEL)
    model.set_structure_factors(np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0]]), np.array([30.0, 40.0, 50.0]))
    F = np.asarray(model.structure_factors[1], dtype=float) * 1.5 + 2.0
    params = nanobragg.Params(model, ["distance", "cell_a"], threads=2, F=F)
    other = pickle.loads(pickle.dumps(params))
    assert other.names == params.names and np.array_equal(other.start, params.start)
    values = np.array(params.start) * [1.01, 0.99]
    v = np.linspace(0.5, 1.5, int(np.prod(model.shape))).reshape(model.shape)
    assert np.array_equal(other.image(values), params.image(values))
    assert np.array_equal(other.vjp(values, v), params.vjp(values, v))
    # F, not the model's own structure factors
    plain = nanobragg.Params(model, ["distance", "cell_a"])
    assert not np.array_equal(other.image(values), plain.image(values))


def test_a_model_can_change_while_another_thread_renders_it():
    model = nanobragg.from_args(MODEL.replace("-detpixels 64", "-detpixels 256 -oversample 3"))
    errors = []

    def renders():
        try:
            for _ in range(3):
                nanobragg.simulate(model, threads=1)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    t = threading.Thread(target=renders)
    t.start()
    changes = 0
    while t.is_alive():
        model["distance"] = 100.0 + changes % 2
        changes += 1
        time.sleep(0.002)
    t.join()
    assert not errors and changes > 1, errors


def test_arrays_of_any_layout_are_read_in_order():
    # misset: the image is not its own transpose, so neither are its
    # derivatives, and weights or an observation read transposed would differ
    model = nanobragg.from_args(MODEL + " -misset 5 10 15")
    p = nanobragg.Params(model, ["distance", "cell_a"])
    x = np.array(p.start)
    image = p.image(x)
    assert not np.allclose(image, image.T)
    v = np.arange(np.prod(model.shape), dtype=float).reshape(model.shape) % 5 - 2
    want = p.vjp(x, v)
    # every other element of a longer array; the transpose of the transpose
    assert np.array_equal(p.vjp(np.repeat(x, 2)[::2], np.asfortranarray(v)), want)
    assert np.array_equal(p.image(np.repeat(x, 2)[::2]), image)
    # an observation in Fortran order (a transposed view, as from a reader
    # that stores columns) is the same observation: its own image fits exactly
    observed = nanobragg.simulate(model)
    assert p.loss(x, np.asfortranarray(observed), loss="sse")["value"] == 0.0
    # one number broadcast (strides 0, as torch's gradient of a sum) is that
    # number in every pixel
    broadcast = np.broadcast_to(np.float64(-1.5), model.shape)
    assert broadcast.strides == (0, 0)
    assert np.array_equal(p.vjp(x, broadcast), p.vjp(x, np.full(model.shape, -1.5)))


def test_the_refined_command_line_carries_values_set_by_name(tmp_path):
    truth = nanobragg.from_args(MODEL.replace("-distance 100", "-distance 100.3"))
    truth["cell_b"] = 101.5
    observed = nanobragg.simulate(truth)
    model = nanobragg.from_args(MODEL)
    model["cell_b"] = 101.5
    r = nanobragg.refine(model, observed, ["distance"])
    assert abs(r.values[0] - 100.3) < 1e-4, r
    again = nanobragg.from_args(r.command_line)  # (its -cell said 100 before)
    assert abs(again["cell_b"] - 101.5) < 1e-9 and abs(again["distance"] - r.values[0]) < 1e-6


def test_thread_counts_have_the_command_lines_limit():
    model = nanobragg.from_args(MODEL)
    for call in (lambda: nanobragg.simulate(model, threads=5000),
                 lambda: nanobragg.Params(model, ["distance"], threads=1025)):
        with pytest.raises(nanobragg.Error, match="from 0 to 1024"):
            call()
    with pytest.raises(nanobragg.Error, match="-threads"):
        nanobragg.from_args(MODEL + " -threads 5000")


def two_modules(path, dx):
    """Two 64 x 64 modules of 0.1 mm at 60 mm side by side (CrystFEL
    geometry), the second moved by `dx` pixels along x."""
    text = "clen = 0.06\nres = 10000\nphoton_energy = 12398.42 eV\n"
    for k, (cx, move) in enumerate([(-66.0, 0.0), (2.0, dx)]):
        text += (f"m{k}/min_fs = 0\nm{k}/max_fs = 63\nm{k}/min_ss = {64 * k}\n"
                 f"m{k}/max_ss = {64 * k + 63}\nm{k}/corner_x = {cx + move}\nm{k}/corner_y = -32\n"
                 f"m{k}/fs = +1x +0y +0z\nm{k}/ss = +0x +1y +0z\n")
    path.write_text(text)
    return path


def test_a_multi_panel_model_refines_its_panels_shifts(tmp_path):
    rest = ("-default_F 200 -cell 48 48 61 90 90 90 -N 10 -oversample 1 -fluence 1e28 "
            "-misset 10 20 30")
    truth = f"-geom {two_modules(tmp_path / 't.geom', 0.6)} {rest}"
    out = cli(truth + " -floatfile obs.bin", tmp_path)
    assert out.returncode == 0, out.stderr
    model = nanobragg.from_args(truth)
    assert model.shape == (128, 64)
    observed = np.fromfile(tmp_path / "obs.bin", dtype=np.float32).reshape(model.shape)
    assert np.array_equal(nanobragg.simulate(model), observed)
    # the model's image of every panel is the command line's
    p = nanobragg.Params(model, ["Xbeam@1", "cell_a"])
    assert p.names == ["Xbeam@1", "cell_a"]
    image = p.image(p.start)
    assert np.abs(image - observed).max() <= 1e-6 * observed.max()
    # the derivative images of the whole detector, a panel's on its pixels alone
    _, d = nanobragg.jacobian(model, ["Xbeam@1", "cell_a"])
    for i in range(2):
        want = p.jvp(p.start, np.eye(2)[i])
        assert np.abs(d[i] - want).max() <= 1e-5 * np.abs(want).max(), i
    assert not d[0][:64].any() and d[0][64:].any()
    # a panel's shift moves its pixels alone
    moved = p.image(p.start + np.array([0.01, 0.0]))
    assert np.array_equal(moved[:64], image[:64]) and not np.array_equal(moved[64:], image[64:])
    start = nanobragg.from_args(f"-geom {two_modules(tmp_path / 's.geom', 0.0)} {rest}")
    r = nanobragg.refine(start, observed, ["Xbeam@*", "Ybeam@m1"])
    assert r.params == ["Xbeam@0", "Xbeam@1", "Ybeam@1"], r
    # CrystFEL's +x is the lab's -x: Xbeam = -corner_x * pixel
    assert abs(r.values[1] - (-0.26)) < 1e-5 and abs(r.values[0] - 6.6) < 1e-5, r
    with pytest.raises(nanobragg.Error, match="name a panel"):
        nanobragg.refine(start, observed, ["Xbeam"])
    # a panel's value set by name: the refined panel is said in a note
    assert "Xbeam@1" in start.parameters and "Xbeam" not in start.parameters
    start["Xbeam@1"] = -0.25
    assert abs(start["Xbeam@1"] + 0.25) < 1e-12
    with pytest.raises(nanobragg.Error, match="Xbeam@\\* names 2 parameters.*Xbeam@0, Xbeam@1"):
        start["Xbeam@*"]
    with pytest.raises(nanobragg.Error, match="names 2 parameters"):
        start["Xbeam@*"] = 1.0
    r = nanobragg.refine(start, observed, ["Xbeam@1"])
    assert abs(r.values[0] - (-0.26)) < 1e-5 and any("panel 1 (m1)" in n for n in r.notes), r


def test_render_of_a_multi_panel_model_is_the_command_lines(tmp_path):
    # two modules six rows apart in the data array: the rows between are no panel's
    text = two_modules(tmp_path / "t.geom", 0.0).read_text().replace(
        "m1/min_ss = 64\nm1/max_ss = 127", "m1/min_ss = 70\nm1/max_ss = 133")
    (tmp_path / "gap.geom").write_text(text)
    args = (f"-geom {tmp_path / 'gap.geom'} -default_F 200 -cell 48 48 61 90 90 90 -N 10 "
            "-oversample 1 -fluence 1e28 -misset 10 20 30 -seed 5")
    out = cli(args + " -floatfile f.bin -intfile i.img -noisefile n.img -nopgm", tmp_path)
    assert out.returncode == 0, out.stderr
    image = nanobragg.render(nanobragg.from_args(args))
    shape = (134, 64)
    assert np.array_equal(image.float, np.fromfile(tmp_path / "f.bin", "<f4").reshape(shape))
    assert not image.float[64:70].any()
    assert np.array_equal(image.int_image(), smv_pixels(tmp_path / "i.img", shape))
    noise, photons, overloads = image.noise_image(noise_rng="c")
    assert np.array_equal(noise, smv_pixels(tmp_path / "n.img", shape))
    assert f"{photons:.0f} photons on noise image ({overloads} overloads)" in out.stdout
    s = image.stats
    assert f"mean= {s['mean']:.6g} rms= {s['rms']:.6g} rmsd= {s['rmsd']:.6g}" in out.stdout
    assert s["pixels"] == 2 * 64 * 64


def test_the_command_lines_warnings_are_python_warnings(tmp_path):
    geom = tmp_path / "one.geom"
    geom.write_text("clen = 0.1\nres = 10000\nphoton_energy = 9500 eV\n"
                    "p0/min_fs = 0\np0/max_fs = 31\np0/min_ss = 0\np0/max_ss = 31\n"
                    "p0/corner_x = -16\np0/corner_y = -16\np0/fs = +1x\np0/ss = +1y\n"
                    "p0/coner_x = 3\n")
    args = f"-geom {geom} -default_F 100 -cell 100 100 100 90 90 90 -N 5"
    with pytest.warns(UserWarning, match="line 12: 'coner_x' is not a CrystFEL geometry key") as said:
        model = nanobragg.from_args(args)
    assert said[0].filename == __file__  # the caller's line
    # flags added later warn of what is new alone
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        model.set_flags("-oversample 1")
    assert said == []
    assert nanobragg.simulate(model).shape == (32, 32)


def test_signatures_show_the_defaults():
    assert "maxiter=100" in nanobragg.refine.__text_signature__
    assert "history=8" in nanobragg.refine.__text_signature__
    assert nanobragg.read_image.__text_signature__ == "(path, frame=0)"


def test_bad_arguments_are_refused_with_a_message():
    model = nanobragg.from_args(MODEL)
    with pytest.raises(nanobragg.Error, match="threads = -1"):
        nanobragg.simulate(model, threads=-1)
    # integers beyond what the argument holds: ValueError, not OverflowError
    for call in [lambda: nanobragg.simulate(model, threads=2**64),
                 lambda: nanobragg.read_image("x.img", frame=2**64),
                 lambda: nanobragg.read_image("x.img", frame=-1),
                 lambda: nanobragg.refine(model, nanobragg.simulate(model), ["distance"],
                                          maxiter=-1),
                 lambda: nanobragg.render(model).noise_image(seed=2**70)]:
        with pytest.raises(ValueError, match="out of range for this argument"):
            call()
    image = nanobragg.render(model)
    with pytest.raises(nanobragg.Error, match="scale = -1"):
        image.int_image(scale=-1)
    hkl = np.array([[1, 0, 0], [0, 1, 0]])
    with pytest.raises(nanobragg.Error, match=r"F\(0 1 0\) = NaN"):
        model.set_structure_factors(hkl, np.array([10.0, np.nan]))
    with pytest.raises(nanobragg.Error, match="complex"):
        model.set_structure_factors(hkl, np.array([10.0 + 1j, 5.0]))
    p = nanobragg.Params(model, ["distance"])
    observed = nanobragg.simulate(model)
    bad = observed.copy()
    bad[3, 4] = np.inf
    with pytest.raises(nanobragg.Error, match="inf at pixel"):
        p.loss(p.start, bad, loss="sse")
    negative = np.round(observed)
    negative[0, 0] = -2
    with pytest.raises(nanobragg.Error, match="Poisson loss takes counts >= 0"):
        p.loss(p.start, negative, loss="poisson")
    # the same pixel skipped: taken
    skip = np.zeros(observed.shape, dtype=bool)
    skip[0, 0] = True
    assert np.isfinite(p.loss(p.start, negative, loss="poisson", skip=skip)["value"])


def test_a_command_line_of_several_images_is_refused(tmp_path):
    # an Experiment is one image: a rotation series and an experiment list are the command
    # line's
    with pytest.raises(nanobragg.Error, match="rotation series of 4 images"):
        nanobragg.from_args(MODEL + " -osc 0.5 -images 4")
    beam = ('{"direction": [0, 0, 1], "wavelength": 1.0, "polarization_normal": [0, 1, 0], '
            '"polarization_fraction": 0.999}')
    panel = ('{"name": "p", "origin": [-2.0, 2.0, -100.0], "fast_axis": [1, 0, 0], '
             '"slow_axis": [0, -1, 0], "pixel_size": [0.1, 0.1], "image_size": [16, 16]}')
    (tmp_path / "two.expt").write_text(
        '{"__id__": "ExperimentList", "experiment": [{"beam": 0, "detector": 0}, '
        f'{{"beam": 0, "detector": 0}}], "beam": [{beam}], "detector": [{{"panels": [{panel}]}}]}}')
    path = str(tmp_path / "two.expt")
    with pytest.raises(nanobragg.Error, match="2 experiments"):
        nanobragg.from_args(MODEL + f" -expt {path}")
    with pytest.raises(nanobragg.Error, match="2 experiments"):
        nanobragg.Detector.from_expt(path)
