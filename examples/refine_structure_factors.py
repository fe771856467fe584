"""Refine the structure factors of a small cell from several stills: start
from flat amplitudes, fit every |F| of the grid to noisy images of a
crystal in four orientations with torch.optim, the gradients by F computed
by the engine.

    python examples/refine_structure_factors.py
"""

import pathlib
import tempfile

import numpy as np
import torch

import nanobragg
from nanobragg.torch import render

FLAGS = ("-cell 24 26 28 90 90 90 -N 6 -lambda 1.0 -distance 60 -detpixels 192 -pixel 0.5 "
         "-oversample 1 -fluence 1e29 -nointerpolate")
ORIENTATIONS = [(0, 0, 0), (30, 10, 0), (0, 40, 20), (60, -20, 35)]

rng = np.random.default_rng(5)
hkl = np.array([(h, k, l) for h in range(-4, 5) for k in range(-4, 5) for l in range(-4, 5)])
true_f = rng.uniform(20, 200, size=len(hkl))

tmp = tempfile.TemporaryDirectory()
path = pathlib.Path(tmp.name) / "flat.hkl"
path.write_text("".join(f"{h} {k} {l} 100\n" for h, k, l in hkl))
shots = [nanobragg.from_args(f"{FLAGS} -hkl {path} -misset {x} {y} {z}")
         for x, y, z in ORIENTATIONS]

# the observed stills: the true amplitudes, Poisson noise
observed = []
for i, shot in enumerate(shots):
    truth = nanobragg.from_args(shot.args)
    truth.set_structure_factors(hkl, true_f)
    noisy, _, _ = nanobragg.render(truth).noise_image(seed=i + 1, adc=0)
    observed.append(torch.from_numpy(noisy.astype(np.float64)))

origin, flat = shots[0].structure_factors
truth_grid = np.zeros_like(flat)
truth_grid[tuple((hkl - np.array(origin)).T)] = true_f
F = torch.tensor(flat, requires_grad=True)
opt = torch.optim.Adam([F], lr=2.0)
seen = None
for it in range(300):
    opt.zero_grad()
    loss = 0.0
    for shot, obs in zip(shots, observed):
        image = render(shot, F=F)
        loss = loss + (image - obs * torch.log(image.clamp_min(1e-6))).sum()
    loss.backward()
    if seen is None:
        g = F.grad.abs().numpy()
        seen = g > 1e-3 * g.max()   # the reflections the stills measure, not only graze
    opt.step()
    with torch.no_grad():
        F.clamp_(min=0.0)
    if it % 50 == 0 or it == 299:
        r = np.corrcoef(F.detach().numpy()[seen], truth_grid[seen])[0, 1]
        print(f"{it:4d} loss {loss.item():.6e}  correlation with the truth over the "
              f"{int(seen.sum())} reflections seen: {r:.3f}")
