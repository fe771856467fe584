"""nanobragg: absolute-scale X-ray diffraction images of small crystals.

    import nanobragg as nb
    experiment = nb.Experiment(
        beam=nb.Beam(lambda_a=6.2),
        crystal=nb.Crystal(cell=(100, 100, 100, 90, 90, 90), N=5, default_F=100),
        detector=nb.Detector(distance_mm=100, fpixels=256, spixels=256))
    image = nb.simulate(experiment)                   # float32, (slow, fast)
    experiment.crystal.cell_a = 101                   # and render again
    image, d = nb.jacobian(experiment, ["distance", "cell_a"])
    experiment.to_args()                              # the command line that renders it

`from_args` builds the same objects from any nanoBragg command line, through
the command line's own parser; errors raise `nanobragg.Error` with the
command line's message.
"""

from ._nanobragg import (Beam, Crystal, Detector, Error, Experiment, Image, Model, Panel, Params,
                         Refined, from_args, jacobian, read_image, refine, render, simulate)

__all__ = ["Beam", "Crystal", "Detector", "Error", "Experiment", "Image", "Model", "Panel",
           "Params", "Refined", "from_args", "jacobian", "read_image", "refine", "render",
           "simulate"]
