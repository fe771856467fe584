"""Build an experiment from objects (no command line), render it, change
its cell, and refine the cell back against the first image.

    python examples/experiment_objects.py
"""

import numpy as np

import nanobragg as nb

experiment = nb.Experiment(
    beam=nb.Beam(lambda_a=1.0, fluence=1e26),
    crystal=nb.Crystal(cell=(78, 78, 38, 90, 90, 90), N=10, default_F=100,
                       misset=(20, -13, 40), mosaic_deg=0.05, mosaic_domains=4),
    detector=nb.Detector(distance_mm=100, pixel_mm=0.4, fpixels=256, spixels=256),
    oversample=1,
    seed=3,
)
print(experiment)
observed, _, _ = nb.render(experiment).noise_image(adc=0)   # Poisson counts

# the experiment's parts are shared: a changed cell is the next render's
experiment.crystal.cell_a = 78.3
experiment.crystal.cell_c = 37.9
moved = nb.simulate(experiment)
print(f"cell a = 78.3 Å, c = 37.9 Å: max |Δ| = {np.abs(moved - observed).max():.0f} photons")

r = nb.refine(experiment, observed.astype(np.float64), ["cell_a", "cell_c"], loss="poisson")
print(r)
refined = r.experiment.crystal
print(f"refined cell a = {refined.cell_a:.3f} Å (truth 78), c = {refined.cell_c:.3f} Å (truth 38)")
assert r.success and abs(refined.cell_a - 78) < 0.02 and abs(refined.cell_c - 38) < 0.02
print("the command line of the refined experiment:")
print("nanobragg " + " ".join(r.experiment.to_args()))
