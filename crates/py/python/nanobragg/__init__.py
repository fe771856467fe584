"""nanobragg: absolute-scale X-ray diffraction images of small crystals.

    import nanobragg
    model = nanobragg.from_args("-default_F 100 -cell 100 100 100 90 90 90 "
                                "-lambda 6.2 -N 5 -distance 100 -detpixels 256")
    image = nanobragg.simulate(model)                 # float32, (slow, fast)
    image, d = nanobragg.jacobian(model, ["distance", "cell_a"])

`from_args` accepts any nanoBragg command line, through the command line's
own parser; errors raise `nanobragg.Error` with the command line's message.
"""

from ._nanobragg import (Error, Image, Model, Params, Refined, from_args, jacobian, read_image,
                         refine, render, simulate)

__all__ = ["Error", "Image", "Model", "Params", "Refined", "from_args", "jacobian", "read_image",
           "refine", "render", "simulate"]
