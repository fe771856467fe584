"""Side-by-side timings of the Python package (docs/python.md):

1. the Python call's overhead over the engine's own time, 1024² render;
2. torch backward over every parameter the model has, against the forward;
3. against nanobrag_torch (the PyTorch port) on the CPU, the same experiment
   at 1024², forward and forward + backward (of the image's sum, and of a
   weighted sum, whose gradient is a weight per pixel), the same threads;
4. two Python threads rendering at once (one engine thread each) against the
   same two renders one after the other: the GIL is released while the engine
   runs (the pair takes about half the time on two free cores).

    python crates/py/bench/bench.py [--threads N] [--repeat K]

Every run renders anew; the best of K runs is reported (other work on the
machine only adds time). Part 3 is skipped when nanobrag_torch is not
importable (install it from a copy of github:hoidn/nanoBragg with pip).
"""

import argparse
import os
import time

# torch's OpenMP workers spin for a while after each torch operation (the
# gradient's sum, the copies): on a machine with as many cores as threads
# they take the cores from the engine's threads (a 1024² backward took 31
# instead of 14 ms). Passive workers sleep instead; set before torch loads,
# for both programs alike.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# numpy's OpenBLAS starts a worker per core that polls for work it never gets
# here (a 1024² Jᵀv spent 2 % of its samples in them); neither program calls
# numpy's BLAS
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch

import nanobragg
from nanobragg.torch import render

# a misset cubic cell at 1 Å, 1024 x 1024 pixels of 0.1 mm at 100 mm: one
# sample per pixel ("minimal"), and 2 x 2 sub-pixels and 5 mosaic domains
# ("mosaic", 20 samples per pixel)
BASE = ("-default_F 100 -cell 100 100 100 90 90 90 -misset 10 20 30 -lambda 1 -N 5 "
        "-distance 100 -detpixels 1024 -pixel 0.1")
EXPERIMENTS = {
    "minimal": (BASE + " -oversample 1", dict(oversample=1), {}),
    "mosaic": (BASE + " -oversample 2 -mosaic 0.2 -mosaic_domains 5 -mosaic_seed 7",
               dict(oversample=2), dict(mosaic_spread_deg=0.2, mosaic_domains=5, mosaic_seed=7)),
}
COMPARED = ["distance", "cell_a", "cell_b", "cell_c", "lambda"]


def best(f, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def overhead(model, threads, repeat):
    """The Python call's cost over the engine's: `simulate` (the call that
    returns the numpy image) against the engine's own time for the same
    setup and render (`Image.seconds`), best of at least 20 each, the two
    calls alternated; and, as an upper bound that does not depend on timing
    two different calls, a whole `simulate` of an 8 x 8 detector (fixed
    costs of a call plus a tiny render) against the 1024² one."""
    repeat = max(repeat, 20)
    # (alternated: this VM's speed drifts, and a drift between two blocks of
    # calls showed as up to 12 % of "overhead")
    walls, engines = [], []
    for _ in range(repeat):
        walls.append(best(lambda: nanobragg.simulate(model, threads=threads), 1))
        engines.append(nanobragg.render(model, threads=threads).seconds)
    wall, engine = min(walls), min(engines)
    tiny = nanobragg.from_args(model.args + ["-detpixels", "8"])
    call = best(lambda: nanobragg.simulate(tiny, threads=threads), repeat)
    print(f"1. call overhead at 1024²: simulate {wall * 1e3:.2f} ms, the engine {engine * 1e3:.2f} ms"
          f" ({(wall - engine) / wall * 100:+.1f} %); a whole 8 x 8 call {call * 1e3:.3f} ms"
          f" = {call / wall * 100:.1f} % of the 1024² call")


def two_threads(model, repeat):
    """Part 4: the best of `repeat` serial pairs and parallel pairs of
    one-thread renders, alternated."""
    import threading

    def run():
        nanobragg.simulate(model, threads=1)

    def parallel():
        workers = [threading.Thread(target=run) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    serial, pair = float("inf"), float("inf")
    for _ in range(max(repeat, 3)):
        serial = min(serial, best(lambda: (run(), run()), 1))
        pair = min(pair, best(parallel, 1))
    print(f"4. two renders at once: {pair * 1e3:.1f} ms, one after the other {serial * 1e3:.1f} ms"
          f" ({pair / serial:.2f} of the serial time)")


_WEIGHTS = {}


def loss(image, kind):
    """The loss a backward pass starts from: the image's sum (whose gradient
    reaches the engine as one number broadcast) or, "dense", a weighted sum
    (a gradient of a weight per pixel, as a least-squares loss gives)."""
    if kind == "dense":
        key = (image.shape, image.dtype)
        if key not in _WEIGHTS:  # made once, outside the timings
            n = image.numel()
            _WEIGHTS[key] = torch.linspace(0.5, 1.5, n, dtype=image.dtype).reshape(image.shape)
        return (image * _WEIGHTS[key]).sum()
    return image.sum()


def nanobragg_torch_pass(model, names, threads, repeat, backward):
    """`backward`: False (forward only), True or "sum", or "dense" (see `loss`)."""
    xs = {n: torch.tensor(model[n], dtype=torch.float64, requires_grad=bool(backward))
          for n in names}

    def once():
        image = render(model, threads=threads, **xs)
        if backward:
            loss(image, backward).backward()
        return image

    return best(once, repeat), once()


def torch_backward(model, threads, repeat):
    names = model.parameters
    forward, _ = nanobragg_torch_pass(model, names, threads, repeat, False)
    both, _ = nanobragg_torch_pass(model, names, threads, repeat, True)
    print(f"2. torch over all {len(names)} parameters ({', '.join(names)}):")
    print(f"   forward {forward * 1e3:.1f} ms, backward {(both - forward) * 1e3:.1f} ms: "
          f"backward / forward = {(both - forward) / forward:.2f}")


def port_simulator(backward, detector_extra, crystal_extra):
    from nanobrag_torch.config import BeamConfig, CrystalConfig, DetectorConfig
    from nanobrag_torch.models.crystal import Crystal
    from nanobrag_torch.models.detector import Detector
    from nanobrag_torch.simulator import Simulator

    t = lambda x: torch.tensor(x, dtype=torch.float64, requires_grad=backward)
    leaves = {"distance": t(100.0), "cell_a": t(100.0), "cell_b": t(100.0),
              "cell_c": t(100.0), "lambda": t(1.0)}
    crystal_config = CrystalConfig(cell_a=leaves["cell_a"], cell_b=leaves["cell_b"],
                                   cell_c=leaves["cell_c"], cell_alpha=90.0, cell_beta=90.0,
                                   cell_gamma=90.0, N_cells=(5, 5, 5), default_F=100.0,
                                   misset_deg=(10.0, 20.0, 30.0), **crystal_extra)
    detector = Detector(DetectorConfig(distance_mm=leaves["distance"], pixel_size_mm=0.1,
                                       spixels=1024, fpixels=1024, **detector_extra),
                        dtype=torch.float64)
    beam = BeamConfig(wavelength_A=leaves["lambda"])
    crystal = Crystal(crystal_config, beam_config=beam, dtype=torch.float64)
    sim = Simulator(crystal, detector, beam_config=beam, dtype=torch.float64)
    return sim, leaves


def against_the_port(name, model, detector_extra, crystal_extra, threads, repeat):
    try:
        import nanobrag_torch
    except ImportError:
        print("3. nanobrag_torch is not importable: skipped")
        return
    torch.set_num_threads(threads)

    def port(backward):
        sim, leaves = port_simulator(bool(backward), detector_extra, crystal_extra)
        image = sim.run()
        if backward:
            loss(image, backward).backward()
        return image

    port_forward = best(lambda: port(False), repeat)
    port_both = best(lambda: port("sum"), repeat)
    port_dense = best(lambda: port("dense"), repeat)
    ours_forward, ours = nanobragg_torch_pass(model, COMPARED, threads, repeat, False)
    ours_both, _ = nanobragg_torch_pass(model, COMPARED, threads, repeat, "sum")
    ours_dense, _ = nanobragg_torch_pass(model, COMPARED, threads, repeat, "dense")
    theirs = port(False).detach()
    rel = float((ours - theirs).abs().max() / theirs.abs().max())
    print(f"3. {name}: against nanobrag_torch {nanobrag_torch.__version__}, float64, "
          f"{threads} threads, 1024², by {', '.join(COMPARED)} (the images differ by {rel:.1e} "
          f"of the maximum):")
    for what, port_s, ours_s in [("forward", port_forward, ours_forward),
                                 ("forward + backward of the sum", port_both, ours_both),
                                 ("forward + backward of a weighted sum", port_dense, ours_dense)]:
        print(f"   {what}: {port_s * 1e3:.0f} ms vs {ours_s * 1e3:.1f} ms: "
              f"{port_s / ours_s:.1f}x faster")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"{a.threads} threads, best of {a.repeat}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}")
    for name, (args, detector_extra, crystal_extra) in EXPERIMENTS.items():
        model = nanobragg.from_args(args)
        print(f"{name}: {args}")
        overhead(model, a.threads, a.repeat)
        torch_backward(model, a.threads, a.repeat)
        against_the_port(name, model, detector_extra, crystal_extra, a.threads, a.repeat)
        two_threads(model, a.repeat)


if __name__ == "__main__":
    main()
