"""Refine the cell and orientation of a crystal against a noisy image with
torch.optim (Adam on the Poisson loss), from a start 0.1-0.15° and 0.3 % off.

    python examples/refine_orientation.py
"""

import numpy as np
import torch

import nanobragg
from nanobragg.torch import render

FLAGS = ("-default_F 100 -cell 78 78 38 90 90 90 -N 8 -lambda 1.0 -distance 100 "
         "-detpixels 256 -pixel 0.4 -oversample 1 -fluence 1e27 -mosaic 0.05 -mosaic_domains 4 "
         "-mosaic_seed 2 -seed 3")
TRUTH = {"cell_a": 78.0, "cell_c": 38.0, "misset_x": 21.0, "misset_y": -13.0, "misset_z": 40.0}
START = {"cell_a": 78.2, "cell_c": 37.9, "misset_x": 21.1, "misset_y": -13.12, "misset_z": 40.15}


def model_at(values):
    m = nanobragg.from_args(FLAGS + " -misset 0 0 0")
    for name, v in values.items():
        m[name] = v
    return m


truth = model_at(TRUTH)
noisy, _, _ = nanobragg.render(truth).noise_image(adc=0)
observed = torch.from_numpy(noisy.astype(np.float64))

model = model_at(START)
xs = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in START.items()}
# a step of about 0.01 in each parameter's unit per iteration
opt = torch.optim.Adam(xs.values(), lr=0.005)
for it in range(200):
    opt.zero_grad()
    image = render(model, **xs)
    loss = (image - observed * torch.log(image.clamp_min(1e-6))).sum()  # Poisson
    loss.backward()
    opt.step()
    if it % 25 == 0 or it == 199:
        print(f"{it:4d} loss {loss.item():.6e}  " +
              "  ".join(f"{n} {x.item():.4f}" for n, x in xs.items()))
for n, x in xs.items():
    print(f"{n:9s} refined {x.item():9.4f}  truth {TRUTH[n]:9.4f}  start {START[n]:9.4f}")
