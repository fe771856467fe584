"""Render 100 stills of one crystal in random orientations (uniform over
rotations), each with its own Poisson noise, into one numpy array.

    python examples/random_orientations.py [out.npy]
"""

import sys
import time

import numpy as np

import nanobragg

FLAGS = ("-default_F 100 -cell 79 79 38 90 90 90 -N 10 -lambda 1.3 -distance 150 "
         "-detpixels 512 -pixel 0.2 -oversample 1 -mosaic 0.1 -mosaic_domains 5")


def random_angles(rng):
    """XYZ rotation angles (degrees) of a rotation uniform over SO(3)."""
    q = rng.normal(size=4)
    w, x, y, z = q / np.linalg.norm(q)
    r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                  [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                  [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    # R = Rz Ry Rx (-misset: x, then y, then z)
    ay = np.arcsin(-np.clip(r[2, 0], -1, 1))
    ax = np.arctan2(r[2, 1], r[2, 2])
    az = np.arctan2(r[1, 0], r[0, 0])
    return np.degrees([ax, ay, az])


rng = np.random.default_rng(1)
stack = np.zeros((100, 512, 512), dtype=np.uint16)
t0 = time.perf_counter()
for i in range(100):
    model = nanobragg.from_args(FLAGS)
    for name, angle in zip(["misset_x", "misset_y", "misset_z"], random_angles(rng)):
        model[name] = angle
    stack[i], photons, _ = nanobragg.render(model).noise_image(seed=i + 1)
print(f"100 stills of 512 x 512 in {time.perf_counter() - t0:.1f} s; "
      f"{int((stack > 40).sum())} pixels above the ADC offset")
if len(sys.argv) > 1:
    np.save(sys.argv[1], stack)
