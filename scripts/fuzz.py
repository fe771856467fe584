#!/usr/bin/env python3
"""Seeded mutation fuzzing of the nanobragg command line and its input files.

Each execution takes a known-good run (a golden case's command line, or a
run built around one input file: -hkl, -mat, -sourcefile, -img, -mask, an
Fdump, -batch, -gradient, refine, noisify, add, -expt, -geom, -spectrum,
-stol, nonbragg, a dataset spec), mutates its arguments or the input's
bytes, and runs the binary in a fresh directory under a wall-clock limit, an
address-space limit and a file-size limit (SIGXFSZ ignored, so an oversized
write is a write error, as on a full disk). An execution may run several
commands in turn (a dataset rendered, its folder then mutated, then
resumed); every command is checked. Execution i depends only on the seed,
i and the targets chosen (--targets).

Failures counted, per target:
  panic    exit status 101 or "panicked at" on stderr (Python: a PanicException)
  crash    ended by a signal (abort, segfault, ...) or an allocation failure
  hang     past the time limit having used < 20 % of a core (blocked: a pipe,
           a lock, a FIFO); runs past the limit while computing are counted
           as "slow"
  stray    a temporary or kept-aside old output (a hidden ".*.tmp*" or
           ".*.old.*" file) left anywhere in the run's directory
  unclear  exit status 1 without a line starting "error:" on stderr (Python:
           an exception other than nanobragg.Error, ValueError, TypeError)
  replaced a failed command (non-zero exit) of the "outputs" target that
           changed or removed a file that was there before it ran
Every failure is saved as a reproducer under --out: the command's arguments
and the directory as it was before the failing command (files, folders,
links, FIFOs, modes); --replay FILE runs one again. The summary is printed
and written to OUT/summary.json; the exit status is 1 when any failure was
found.

    scripts/fuzz.py --bin target/release/nanobragg --runs 100000 --seed 1
    scripts/fuzz.py --targets expt,geom,dataset --runs 300 --jobs 1
    scripts/fuzz.py --seconds 2100 --runs 1000000 --jobs 1   # a time budget
    scripts/fuzz.py --replay fuzz-out/panic-123.json
"""

import argparse
import base64
import copy
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
GOLDEN_NONBRAGG = os.path.join(ROOT, "tests", "golden-nonbragg")
CELL = "-cell 100 100 100 90 90 90".split()
BASE = "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -pixel 0.1 -distance 100 -detpixels 32".split()
SPECIAL = ["0", "-0", "1", "-1", "2", "0.5", "90", "180", "360", "1e300", "-1e300", "1e-300", "nan",
           "inf", "-inf", "9223372036854775807", "18446744073709551615", "-9223372036854775808",
           "4294967297", "1e9", "100000000", "", " ", "0x10", "1,2", "1e", "--", "-", "\x1b[31mred",
           "\ufeff1", "abc", "all", "/dev/null", "/dev/zero", "nonexistent/dir/f", "..", "."]
PARAMS = ("distance close_distance Xbeam Ybeam detector_rotx detector_roty detector_rotz twotheta "
          "cell_a cell_b cell_c cell_alpha cell_beta cell_gamma misset_x misset_y misset_z Na Nb Nc "
          "mosaic phi osc lambda dispersion divergence polar fluence water default_F fudge").split()
# odd JSON values for .expt fields (NaN and infinities are written as JSON does not allow)
JSON_SPECIAL = [None, 0, -1, 1, 0.5, -0.0, 1e308, -1e308, 1e-308, 5e-324, 2 ** 64, -2 ** 63, 2 ** 1000,
                float("nan"), float("inf"), "", "x", "0", [], [0], [0, 0], [0, 0, 0], [1, 1, 1],
                [1e308, 1e308, 1e308], [0, 0, 1e-300], [[1, 0, 0]], {}, True, False, [1, 2, 3, 4],
                [999999, 999999], [1, 1e6], [65536, 65536], [0.0, 0.0], [-1, -1], [1e-9, 1e-9]]
# odd values for CrystFEL geometry keys
GEOM_SPECIAL = ["0", "-1", "-0", "0.5", "1e300", "1e19", "1e9", "1048576", "2147483647", "4294967296",
                "nan", "inf", "-inf", "", "x", "+1x", "1.005x", "1.02x", "0.99x +0.1y", "0x 0y", "1x 1y",
                "+1z", "-1y +0z", "1e-300x", "+1.0x +0.0y +0.0z", "1x1y", "x y", "/LCLS/photon_energy_eV",
                "9.5 keV", "9500 eV", "9500eV", "100 mm", "1 m", "0.1 km", "0.1mm", "mm", "-100 mm",
                "1e-300", "5e-324", "0x10", "1,2", "\ufeff1", "; comment", "= 3", "%", "ss", "fs"]
# odd TOML values for dataset specs
TOML_SPECIAL = ["0", "-1", "1", "2", "0.5", "-0.5", "1e308", "-1e308", "nan", "inf", "-inf", "+inf",
                "9223372036854775807", "18446744073709551615", "-9223372036854775808", "100000000",
                "100000001", "1_000", "0x10", "true", "false", '""', '"x"', '"1"', "[]", "[1]",
                "[1, 2, 3]", "[5, 1]", "[0, 0]", "[-1, 1]", "[nan, 1]", "[1, inf]", "[1e308, 1e308]",
                '["a", "b"]', "{}", "{ a = 1 }", '"../escape"', '"a/b"', '"/dev/null"', '"."', '".."',
                '"\\u0000"', '"out"', "1979-05-27", '"\\ud800"', "[[1, 2]]", "0.0", "-0.0", "5e-324"]
TIMEOUT_S = 20.0
AS_LIMIT = 4 << 30
PY_AS_LIMIT = 8 << 30
FSIZE_LIMIT = 64 << 20
HOST = socket.gethostname()
DEAD_PID = 4194301  # above the usual pid_max: no such process
FAILURES = ("panic", "crash", "hang", "stray", "unclear", "replaced", "slow")


def golden_args():
    """The golden cases' command lines, with detectors cut to at most 64 pixels a side."""
    text = open(os.path.join(GOLDEN, "cases.toml")).read()
    lines = re.findall(r'^args = "(.*)"$', text, re.M)
    out = []
    for line in lines:
        a = line.split()
        for i, t in enumerate(a[:-1]):
            if t in ("-detpixels", "-detpixels_f", "-detpixels_s") and a[i + 1].isdigit():
                a[i + 1] = str(min(int(a[i + 1]), 64))
            if t == "-detsize":
                a[i + 1] = "6.4"
        out.append(a)
    return out


def golden_nonbragg_args():
    """The nonBragg golden cases' command lines, with detectors cut to at most 64 pixels a side."""
    text = open(os.path.join(GOLDEN_NONBRAGG, "cases.toml")).read()
    out = []
    for line in re.findall(r'^args = "(.*)"$', text, re.M):
        a = line.split()
        for i, t in enumerate(a[:-1]):
            if t.startswith("-detpixels") and a[i + 1].isdigit():
                a[i + 1] = str(min(int(a[i + 1]), 64))
            if t.startswith("-detsize"):
                a[i + 1] = "16"
        out.append(a)
    return out


def golden_input(name):
    with open(os.path.join(GOLDEN, "inputs", name), "rb") as f:
        return f.read()


def nonbragg_input(name):
    with open(os.path.join(GOLDEN_NONBRAGG, "inputs", name), "rb") as f:
        return f.read()


def smv_image(n=32, value=1, pixel=0.1, distance=100.0):
    """A small SMV image with a plausible header."""
    header = ("{\nHEADER_BYTES=512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\n"
              f"SIZE1={n};\nSIZE2={n};\nPIXEL_SIZE={pixel};\nDISTANCE={distance};\n"
              "CLOSE_DISTANCE=100;\nWAVELENGTH=6.2;\nBEAM_CENTER_X=1.6;\nBEAM_CENTER_Y=1.6;\n"
              "ORGX=16;\nORGY=16;\nPHI=0;\nOSC_START=0;\nOSC_RANGE=0;\nTWOTHETA=0;\n}\n").encode()
    return header.ljust(512, b" ") + struct.pack(f"<{n * n}H", *([value] * (n * n)))


def fdump_bytes():
    vals = [10.0 * (i % 7) for i in range(4 * 4 * 4)]  # each axis padded by one
    return b"-1 1 -1 1 -1 1\n\x0c" + struct.pack(f"<{len(vals)}d", *vals)


def float_image(n=1024, value=None):
    return struct.pack(f"<{n}f", *[float(i % 50) if value is None else value for i in range(n)])


class Case:
    """One execution: the directory it starts from and the commands it runs there.

    files: relative path -> bytes; dirs: folders made first; links: path ->
    symbolic link target; fifos: named pipes; modes: path -> permission bits.
    immutable: files made immutable (chattr +i: not even root may write, replace or
    remove them) where the fuzzer runs as root and chattr works, else read-only.
    steps: dicts {"args": [...], "python": bool, "hook": f(rng, dir) or None},
    run in turn, each hook changing the directory after its step.
    check_outputs: a failing last step must leave every regular file as it
    found it ("replaced" otherwise)."""

    def __init__(self, args=None, files=None, python=False):
        self.files = dict(files or {})
        self.dirs, self.links, self.fifos, self.modes, self.immutable = [], {}, [], {}, []
        self.steps = [] if args is None else [{"args": list(args), "python": python, "hook": None}]
        self.check_outputs = False

    def step(self, args, python=False, hook=None):
        self.steps.append({"args": list(args), "python": python, "hook": hook})
        return self

    def state(self):
        return {"files": self.files, "dirs": self.dirs, "links": self.links, "fifos": self.fifos,
                "modes": self.modes, "immutable": self.immutable}


def mutate_bytes(rng, data):
    """Byte- and line-level mutations of an input file."""
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(9)
        if kind == 0 and data:  # flip bytes
            b = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b)
        elif kind == 1:  # truncate
            data = data[: rng.randrange(len(data) + 1)]
        elif kind == 2 and data:  # repeat a chunk
            i = rng.randrange(len(data))
            j = min(len(data), i + rng.randint(1, 256))
            data = data[:j] + data[i:j] * rng.randint(1, 50) + data[j:]
        elif kind == 3:  # a number replaced by a special value
            tokens = list(re.finditer(rb"-?[0-9][0-9.eE+-]*", data))
            if tokens:
                m = rng.choice(tokens)
                data = data[: m.start()] + rng.choice(SPECIAL).encode() + data[m.end():]
        elif kind == 4:  # a line inserted
            lines = data.split(b"\n")
            extra = " ".join(rng.choice(SPECIAL) for _ in range(rng.randint(0, 7))).encode()
            lines.insert(rng.randrange(len(lines) + 1), rng.choice([extra, b"# comment", b"", b"\r"]))
            data = b"\n".join(lines)
        elif kind == 5:  # a BOM, CRLF line ends, or NUL bytes
            data = rng.choice([b"\xef\xbb\xbf" + data, data.replace(b"\n", b"\r\n"), data + b"\0" * 64])
        elif kind == 6:  # a header value replaced (SMV)
            keys = list(re.finditer(rb"([A-Z_0-9]+)=([^;]*);", data[:512]))
            if keys:
                m = rng.choice(keys)
                data = data[: m.start(2)] + rng.choice(SPECIAL).encode() + data[m.end(2):]
        elif kind == 7:  # an extreme index line (hkl-like)
            big = rng.choice(["339", "-339", "2147483647", "1000", "-1000", "1e6"])
            data += f"\n{big} {big} {big} 1\n".encode()
        else:  # empty file or random bytes
            data = rng.choice([b"", bytes(rng.randrange(256) for _ in range(rng.randint(1, 600)))])
    return data


def mutate_args(rng, args, flags):
    """Argument-level mutations: values replaced, tokens dropped, swapped, flags added."""
    args = list(args)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choices(range(7), weights=[35, 7, 7, 15, 15, 6, 15])[0]
        if kind == 0 and args:  # a value replaced
            i = rng.randrange(len(args))
            if not args[i].startswith("-") or args[i][1:2].isdigit():
                args[i] = rng.choice(SPECIAL)
        elif kind == 1 and args:  # a token dropped
            del args[rng.randrange(len(args))]
        elif kind == 2 and len(args) > 1:  # neighbours swapped
            i = rng.randrange(len(args) - 1)
            args[i], args[i + 1] = args[i + 1], args[i]
        elif kind in (3, 4):  # a known flag added with 0-3 values
            flag = rng.choice(flags)
            vals = [rng.choice(SPECIAL + [str(rng.uniform(-500, 500)), str(rng.randint(-5, 300))])
                    for _ in range(rng.choice([0, 1, 1, 1, 2, 3]))]
            at = rng.randrange(len(args) + 1)
            args[at:at] = [flag] + vals
        elif kind == 5:  # a long or unknown token
            args.insert(rng.randrange(len(args) + 1), rng.choice(["-nosuchflag", "x" * 5000, "-" * 3, "-h"]))
        elif kind == 6 and args:  # a value made numeric-extreme
            i = rng.randrange(len(args))
            if re.fullmatch(r"-?[0-9]+(\.[0-9]*)?(e-?[0-9]+)?", args[i]):
                args[i] = rng.choice(["1e300", "1e-300", "-1e300", str(float(args[i]) * 1e6)])
    return args


def maybe_mutate_args(rng, args, flags, p):
    return mutate_args(rng, args, flags) if rng.random() < p else list(args)


def maybe_mutate_bytes(rng, data, p):
    return mutate_bytes(rng, data) if rng.random() < p else data


# ---------------------------------------------------------------------------------------------
# DIALS experiment lists

def expt_model(rng, npanels):
    """A valid one-experiment DIALS list: beam, detector of npanels small panels (laid out
    directly or through a hierarchy, sometimes nested), crystal, goniometer and scan."""
    fs, ss = rng.choice([8, 16, 24]), rng.choice([4, 8, 16])
    px = rng.choice([0.1, 0.172, 0.2])
    hierarchy = rng.random() < (0.5 if npanels > 1 else 0.2)
    gap = rng.choice([0.0, 1.0, 2.5])
    top = (ss * px + gap) * npanels / 2
    thickness, mu = rng.choice([(0.0, 0.0), (0.32, 3.96), (0.32, 0.0), (0.45, 1.2)])  # one sensor for all
    panels = []
    for k in range(npanels):
        down = k * (ss * px + gap)
        if hierarchy:
            origin, fast, slow = [0.0, down, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
        else:
            origin, fast, slow = [-fs * px / 2, top - down, -100.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]
        if rng.random() < 0.2:  # a refined geometry's slightly tilted panel
            fast = [1.0, 0.0, rng.choice([0.01, -0.02, 0.005])]
            slow = [0.0, slow[1], rng.choice([0.0, 0.009, 0.0101])]
        panels.append({"name": f"M{k}", "type": "SENSOR_PAD", "origin": origin, "fast_axis": fast,
                       "slow_axis": slow, "pixel_size": [px, px], "image_size": [fs, ss],
                       "trusted_range": [-1.0, 65535.0], "thickness": thickness,
                       "material": "Si", "mu": mu, "gain": 1.0,
                       "identifier": "", "mask": [], "px_mm_strategy": {"type": "SimplePxMmStrategy"}})
    detector = {"panels": panels}
    if hierarchy:
        children = [{"panel": k} for k in range(npanels)]
        if npanels > 2 and rng.random() < 0.4:
            children = children[:1] + [{"name": "G1", "origin": [0.0, 0.0, 0.0], "fast_axis": [1.0, 0.0, 0.0],
                                        "slow_axis": [0.0, 1.0, 0.0], "children": children[1:]}]
        detector["hierarchy"] = {"name": "", "type": "", "origin": [-fs * px / 2, top, -100.0],
                                 "fast_axis": [1.0, 0.0, 0.0], "slow_axis": [0.0, -1.0, 0.0],
                                 "children": children}
    a = rng.choice([50.0, 78.0, 100.0])
    crystal = {"__id__": "crystal", "real_space_a": [a, 0.0, 0.0], "real_space_b": [0.0, 100.0, 0.0],
               "real_space_c": [0.0, rng.choice([0.0, 10.0]), 100.0], "space_group_hall_symbol": " P 1"}
    experiment = {"__id__": "Experiment", "identifier": "", "beam": 0, "detector": 0, "crystal": 0,
                  "imageset": 0}
    root = {"__id__": "ExperimentList", "experiment": [experiment],
            "imageset": [{"__id__": "ImageSequence", "template": "x_#####.cbf"}],
            "beam": [{"__id__": "monochromatic", "direction": [0.0, 0.0, 1.0],
                      "wavelength": rng.choice([1.0, 1.3, 6.2]), "divergence": 0.0,
                      "sigma_divergence": 0.0, "polarization_normal": [0.0, 1.0, 0.0],
                      "polarization_fraction": rng.choice([0.999, 0.5, 1.0]), "flux": 0.0,
                      "transmission": 1.0}],
            "detector": [detector], "crystal": [crystal], "profile": [], "scaling_model": []}
    if rng.random() < 0.6:
        identity = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        root["goniometer"] = [{"rotation_axis": [1.0, 0.0, 0.0], "fixed_rotation": identity,
                               "setting_rotation": list(identity)}]
        experiment["goniometer"] = 0
    if rng.random() < 0.6:
        root["scan"] = [{"image_range": [1, 1], "batch_offset": 0, "oscillation": [0.0, rng.choice([0.0, 0.1])],
                         "valid_image_ranges": {}, "properties": {"epochs": [0.0], "exposure_time": [0.1]}}]
        experiment["scan"] = 0
    return root


def json_slots(obj):
    """Every (container, key) pair under obj."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            for k in list(x):
                out.append((x, k))
                walk(x[k])
        elif isinstance(x, list):
            for i in range(len(x)):
                out.append((x, i))
                walk(x[i])
    walk(obj)
    return out


def mutate_json(rng, obj):
    """Structure-aware mutations of a JSON document: values replaced, removed, scaled,
    duplicated; lists emptied or grown; deep nesting; keys renamed."""
    obj = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        slots = json_slots(obj)
        if not slots:
            break
        c, k = rng.choice(slots)
        kind = rng.randrange(9)
        if kind in (0, 1):  # an odd value
            c[k] = copy.deepcopy(rng.choice(JSON_SPECIAL))
        elif kind == 2:  # removed
            del c[k]
        elif kind == 3:  # a number scaled, negated, zeroed or made a near-boundary value
            v = c[k]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                c[k] = rng.choice([v * 1e6, -v, 0, v * 1e-9, v + 1e-12, v * (1 + 1e-15), float(v) + 0.5])
            elif isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
                i = rng.randrange(len(v))
                v[i] = rng.choice([v[i] * 1e6, -v[i], 0, 1e-300, float("nan"), 1e300])
        elif kind == 4:  # a list element duplicated (several experiments, a panel twice)
            if isinstance(c[k], list) and c[k]:
                c[k].append(copy.deepcopy(rng.choice(c[k])))
            elif isinstance(c, list):
                c.insert(k, copy.deepcopy(c[k]))
        elif kind == 5:  # deep nesting
            depth = rng.choice([63, 64, 65, 66, 127, 128, 129, 200, 5000])
            node = rng.choice([{"panel": 0}, [0, 0, 0], {}])
            for _ in range(depth):
                node = {"origin": [0, 0, 0], "fast_axis": [1, 0, 0], "slow_axis": [0, 1, 0], "children": [node]} \
                    if isinstance(node, dict) and rng.random() < 0.9 else [node]
            c[k] = node
            break  # (walking it again would recurse too deep)
        elif kind == 6:  # a key renamed (misspelled or the other axis)
            if isinstance(c, dict):
                new = rng.choice([k + "x", k.upper(), "fast_axis", "slow_axis", "origin", "panel", "children", ""])
                c[new] = c.pop(k)
        elif kind == 7:  # an index out of range, negative, fractional or huge
            c[k] = rng.choice([1, 2, -1, 0.5, 2 ** 63, 2 ** 64, 10 ** 30, "0", 99])
        else:  # axes swapped or made parallel / antiparallel
            if isinstance(c, dict) and "fast_axis" in c and "slow_axis" in c:
                op = rng.randrange(4)
                if op == 0:
                    c["fast_axis"], c["slow_axis"] = c["slow_axis"], c["fast_axis"]
                elif op == 1:
                    c["slow_axis"] = list(c["fast_axis"])
                elif op == 2:
                    c["slow_axis"] = [-x for x in c["fast_axis"]] if isinstance(c["fast_axis"], list) else 0
                else:
                    c["origin"] = [0.0, 0.0, 0.0]
    return obj


def dump_json(obj):
    """obj as text: NaN and infinities as Python writes them (not JSON)."""
    try:
        return json.dumps(obj, indent=1).encode()
    except (ValueError, RecursionError):
        return b'{"experiment": ' * 1000


def expt_bytes(rng, npanels=None, mutate=0.7):
    if npanels is None:
        npanels = rng.choice([1, 1, 2, 3, 4])
    model = expt_model(rng, npanels)
    if rng.random() < mutate:
        model = mutate_json(rng, model)
    data = dump_json(model)
    if rng.random() < 0.15:
        data = mutate_bytes(rng, data)
    return data


# ---------------------------------------------------------------------------------------------
# CrystFEL geometry files

GEOM_EXTRA = ["wavelength = 1.0", "electron_voltage = 10000", "detector_shift_x = 0.001",
              "detector_shift_y = /x/y", "dim0 = %", "dim1 = ss", "dim2 = fs", "mask = /entry/mask",
              "mask_file = m.h5", "mask_good = 0x0", "mask_bad = 0xff", "mask0_data = /m0",
              "rigid_group_q0 = p0,p1", "rigid_group_collection_all = q0", "group_all = p0,p1",
              "adu_per_eV = 0.001", "adu_per_photon = 1", "max_adu = 60000", "flag_morethan = 65000",
              "clen_for_centering = 0.1", "photon_energy_scale = 0.5", "photon_energy_scale = -1",
              "photon_energy_scale = 0", "photon_energy_scale = nan", "coner_x = 3", "cofset = 0.001",
              "bad_beamstop/min_x = -5", "bad_beamstop/max_x = 5", "bad_beamstop/min_y = -5",
              "bad_beamstop/max_y = 5", "bad_beamstop/panel = p0", "p0/photon_energy = 12 keV",
              "p0/no_index = 1", "p0/rigid_group = q0", "badrow_direction = -", "peak_list = /p",
              "data = /entry/data/data", "p0/dim0 = 0", "p0/data = /x", "p0/clen = 0.05",
              "p0/coffset = 0.01", "p0/res = 5000", "p1/res = 10000", "p0/coffset = 1e300",
              "photon_energy = 2000 eV", "photon_energy = 2 keV", "photon_energy = /LCLS/eV",
              "clen = /LCLS/detector_1/EncoderValue", "= 1", "p0/ = 1", "/min_fs = 0", "p0/min_fs",
              "p0/min_fs == 3", "p0//min_fs = 0", "p0/p1/min_fs = 0", "p\u00e9/min_fs = 0", "\0 = \0",
              "p0/min_fs = 0 ; comment", ";", "   ", "x" * 5000 + " = 1"]


def geom_lines(rng, npanels):
    """A valid CrystFEL geometry of npanels small panels: global defaults and per-panel keys
    as (key, value) pairs."""
    fs, ss = rng.choice([8, 16]), rng.choice([4, 8])
    res = rng.choice([10000, 5000])  # pixels per m: 0.1 or 0.2 mm
    px_mm = 1000.0 / res
    lines = [(None, "; fuzz geometry"), ("clen", rng.choice(["0.1", "100 mm", "0.08"])), ("res", str(res)),
             ("photon_energy", rng.choice(["2000 eV", "2 keV", "2000", "9537 eV"])), ("data", "/entry/data/data")]
    if rng.random() < 0.3:
        lines += [("dim0", "%"), ("dim1", "ss"), ("dim2", "fs"), ("adu_per_eV", "0.001")]
    stacked = rng.random() < 0.7
    for k in range(npanels):
        p = f"p{k}" if rng.random() < 0.8 else f"q{k}a{k}"
        min_fs, min_ss = (0, k * ss) if stacked else (k * fs, 0)
        corner_x = -fs / 2
        corner_y = ss * npanels / 2 - k * (ss + rng.choice([0, 2]))
        lines += [(f"{p}/min_fs", str(min_fs)), (f"{p}/max_fs", str(min_fs + fs - 1)),
                  (f"{p}/min_ss", str(min_ss)), (f"{p}/max_ss", str(min_ss + ss - 1)),
                  (f"{p}/corner_x", f"{corner_x:g}"), (f"{p}/corner_y", f"{corner_y:g}"),
                  (f"{p}/fs", rng.choice(["+1.0x +0.0y", "x", "1x", "+1.0x +0.0y +0.0z"])),
                  (f"{p}/ss", rng.choice(["0x -1y", "-y", "-1.0y", "+0.0x -1.0y"]))]
        if rng.random() < 0.3:
            lines.append((f"{p}/coffset", rng.choice(["0.002", "0", "-0.001", "1 mm"])))
        if rng.random() < 0.2:
            lines.append((f"{p}/res", str(res)))
    if px_mm and rng.random() < 0.2:
        rng.shuffle(lines)
    return lines


def mutate_geom(rng, lines):
    """Line-level mutations of a geometry: a value replaced, a line removed, duplicated,
    moved, made global or another panel's, an extra or refused key added."""
    lines = list(lines)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(7)
        i = rng.randrange(len(lines)) if lines else 0
        if kind in (0, 1) and lines:  # a value replaced
            key, _ = lines[i]
            if key is not None:
                lines[i] = (key, rng.choice(GEOM_SPECIAL + [str(rng.randint(-100, 100000))]))
        elif kind == 2 and lines:  # removed
            del lines[i]
        elif kind == 3 and lines:  # duplicated with another value, or moved
            key, _ = lines[i]
            if key is not None:
                lines.insert(rng.randrange(len(lines) + 1), (key, rng.choice(GEOM_SPECIAL)))
        elif kind == 4 and lines:  # a panel key made global, or moved to another panel
            key, value = lines[i]
            if key and "/" in key:
                lines[i] = (rng.choice([key.split("/", 1)[1], "p9/" + key.split("/", 1)[1],
                                        "bad_" + key, "rigid_group_" + key.replace("/", "_")]), value)
        elif kind == 5:  # an extra line
            lines.insert(rng.randrange(len(lines) + 1), (None, rng.choice(GEOM_EXTRA)))
        else:  # many panels, or one pixel each
            n = rng.choice([64, 300])
            for k in range(n):
                lines += [(f"m{k}/min_fs", str(k)), (f"m{k}/max_fs", str(k)), (f"m{k}/min_ss", "0"),
                          (f"m{k}/max_ss", "0"), (f"m{k}/corner_x", str(k)), (f"m{k}/corner_y", "0"),
                          (f"m{k}/fs", "x"), (f"m{k}/ss", "y")]
    return lines


def geom_text(lines):
    return "".join((v if k is None else f"{k} = {v}") + "\n" for k, v in lines).encode()


def geom_bytes(rng, npanels=None, mutate=0.7):
    if npanels is None:
        npanels = rng.choice([1, 1, 2, 3, 4])
    lines = geom_lines(rng, npanels)
    if rng.random() < mutate:
        lines = mutate_geom(rng, lines)
    data = geom_text(lines)
    if rng.random() < 0.15:
        data = mutate_bytes(rng, data)
    return data


# ---------------------------------------------------------------------------------------------
# spectra and amorphous-material tables

def spectrum_bytes(rng, centre=6.2, mutate=0.7):
    """A -spectrum file (`# wavelengths, weights`, then `lambda,weight` lines), mutated:
    odd values, zero weights, many lines, extra columns, other separators."""
    n = rng.randint(1, 8)
    rows = [[centre * (1 + 0.002 * (k - n / 2)), round(rng.uniform(0.05, 1.0), 4)] for k in range(n)]
    header = rng.choice(["# wavelengths, weights", "wavelengths,weights", "", "#"])
    sep = rng.choice([",", ", ", " ", "\t", ",  "])
    if rng.random() < mutate:
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(7)
            if kind in (0, 1) and rows and rng.choice(rows):  # a value replaced
                r = rng.choice([r for r in rows if r])
                r[rng.randrange(len(r))] = rng.choice(["0", "-0", "-1", "nan", "inf", "1e300", "1e-300", "5e-324",
                                                  "", "x", "1e6", "1e-6", "-6.2", "0x10", "1,2"])
            elif kind == 2:  # every weight 0
                for r in rows:
                    r[1:2] = [0]
            elif kind == 3:  # many lines
                m = rng.choice([1000, 20000])
                rows = [[centre * (1 + 1e-5 * k), 1.0] for k in range(m)]
            elif kind == 4:  # extra or missing columns
                r = rng.choice(rows)
                r[:] = rng.choice([r + ["1", "2"], r[:1], [], r + ["nan"]])
            elif kind == 5:  # a wide or far spectrum
                rows = [[rng.choice([0.01, 0.1, 1.0, 6.2, 100.0, 1e4]) * (1 + 0.5 * k), 1.0] for k in range(n)]
            else:  # the same wavelength twice
                rows.append(list(rows[0]))
    text = (header + "\n" if header else "") + "".join(sep.join(str(x) for x in r) + "\n" for r in rows)
    data = text.encode()
    if rng.random() < 0.15:
        data = mutate_bytes(rng, data)
    return data


def stol_bytes(rng, mutate=0.7):
    """A .stol table (sin(theta)/lambda and F per line): a golden one or a made one, mutated:
    non-monotonic, repeated rows, one row, odd values, comments, extra columns."""
    pick = rng.randrange(4)
    if pick == 0:
        data = nonbragg_input(rng.choice(["water.stol", "air.stol", "ice.stol", "unity.stol",
                                          "shortwater.stol", "negF.stol", "nanoice.stol"]))
        rows = [ln.split() for ln in data.decode().splitlines()]
    else:
        n = rng.choice([2, 3, 5, 20, 100])
        rows = [[f"{0.8 * k / (n - 1):.6g}", f"{2.57 * math.exp(-3 * k / n):.6g}"] for k in range(n)]
    if rng.random() < mutate:
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(7)
            if kind in (0, 1) and rows:
                r = rng.choice(rows)
                if r:
                    r[rng.randrange(len(r))] = rng.choice(["0", "-1", "nan", "inf", "-inf", "1e300", "1e-300",
                                                           "", "x", "#", "1e6", "-0.5", "0x10"])
            elif kind == 2 and len(rows) > 1:  # out of order
                i, j = rng.randrange(len(rows)), rng.randrange(len(rows))
                rows[i], rows[j] = rows[j], rows[i]
            elif kind == 3 and rows:  # a repeated row
                i = rng.randrange(len(rows))
                rows.insert(i, list(rows[i]))
            elif kind == 4:  # one row, or none
                rows = rows[:rng.choice([0, 1])]
            elif kind == 5 and rows:  # a comment line or an extra column
                rows.insert(rng.randrange(len(rows) + 1), rng.choice([["#", "comment"], ["# 0 0"], ["1", "2", "3"], []]))
            else:  # a table that ends early or reaches far
                rows.append([rng.choice(["10", "100", "1e6"]), "0.1"])
    data = "".join(" ".join(r) + "\n" for r in rows).encode()
    if rng.random() < 0.15:
        data = mutate_bytes(rng, data)
    return data


# ---------------------------------------------------------------------------------------------
# the targets

def legacy(weight, args, files, mutated):
    """A target of one command around one input file: the file's bytes mutated (70 %), or
    its arguments (always when there is no file, else 30 %)."""
    def build(rng, ctx):
        a, fl = list(args), dict(files)
        if mutated and rng.random() < 0.7:
            fl[mutated] = mutate_bytes(rng, fl[mutated])
        if mutated is None or rng.random() < 0.3:
            a = mutate_args(rng, a, ctx["flags"])
        return Case(a, fl)
    return weight, build


def t_args(rng, ctx):
    """A golden case's command line, mutated (its input files as they are)."""
    args = list(rng.choice(ctx["goldens"]))
    files = {n: golden_input(n) for n in re.findall(r"inputs/([^ ]+)", " ".join(args))}
    args = [a.replace("inputs/", "") for a in args]
    return Case(mutate_args(rng, args, ctx["flags"]), files)


def t_expt(rng, ctx):
    """-expt with a DIALS experiment list of one to four panels (directly placed or through a
    hierarchy), its JSON mutated by structure or bytes, with other flags before and after it
    (detector placement after it must be refused, multi-panel refusals: -cbffile, -curved_det,
    -detector_rot*). Checks the generic failures."""
    data = expt_bytes(rng)
    args = ["-default_F", "100", "-N", "3"] + rng.choice([[], CELL]) + ["-expt", "in.expt", "-floatfile", "f.bin"]
    args += rng.choice([[], [], ["-nxmxfile", "x.nxs"], ["-intfile", "i.img", "-noisefile", "n.img"],
                        ["-cbffile", "x.cbf"], ["-gradient", "close_distance,Xbeam"], ["-roi", "0", "5", "0", "20"],
                        ["-psf", "gauss", "-noisefile", "n.img"], ["-oversample", "2"], ["-dtype", "float32"],
                        ["-printout_pixel", "3", "20"], ["-curved_det"], ["-detector_rotx", "2"],
                        ["-distance", "90"], ["-lambda", "1.5"], ["-batch", "shots.txt"]])
    files = {"in.expt": data, "shots.txt": b"0 0 0\n5 0 0\n"}
    return Case(maybe_mutate_args(rng, args, ctx["flags"], 0.3), files)


def t_geom(rng, ctx):
    """-geom with a CrystFEL geometry of one to four panels (stacked or side by side in the
    data array, global defaults and per-panel keys), mutated by line (odd values, refused and
    misspelled keys, panels moved, many panels) or bytes, with other flags around it."""
    data = geom_bytes(rng)
    args = ["-default_F", "100", "-N", "3"] + CELL + rng.choice([[], ["-lambda", "6.2"]]) + ["-geom", "in.geom", "-floatfile", "f.bin"]
    args += rng.choice([[], [], ["-nxmxfile", "x.nxs"], ["-intfile", "i.img"], ["-cbffile", "x.cbf"],
                        ["-gradient", "Xbeam,cell_a"], ["-mask", "mask.img"], ["-energy", "9000"],
                        ["-psf", "fiber", "-noisefile", "n.img"], ["-pixel", "0.1"], ["-twotheta", "5"],
                        ["-nxmx_compression", "bslz4", "-nxmxfile", "x.nxs"]])
    files = {"in.geom": data, "mask.img": smv_image(16, 1)}
    return Case(maybe_mutate_args(rng, args, ctx["flags"], 0.3), files)


def t_spectrum(rng, ctx):
    """-spectrum with a spectrum file (header, then `lambda,weight` lines), mutated by value
    (zero, negative, NaN weights and wavelengths, many lines, extra columns) or bytes, with the
    flags that combine with it (-divergence, -dispersion, -lambda_scale/offset, -sourcefile)."""
    data = spectrum_bytes(rng)
    args = BASE + ["-spectrum", "s.lam", "-floatfile", "f.bin"]
    args += rng.choice([[], [], ["-divergence", "0.1", "-divsteps", "2"], ["-dispersion", "1", "-dispsteps", "3"],
                        ["-lambda_scale", "1.01", "-lambda_offset", "0.01"], ["-sourcefile", "src.txt"],
                        ["-gradient", "lambda"], ["-spectrum", "s.lam"], ["-lambda", "1"], ["-dtype", "float32"],
                        ["-stol", "w.stol"]])
    files = {"s.lam": data, "src.txt": golden_input("sources3.txt"), "w.stol": nonbragg_input("unity.stol")}
    return Case(maybe_mutate_args(rng, args, ctx["flags"], 0.25), files)


def t_stol(rng, ctx):
    """An amorphous-material table through -stol (or -4stol, -Q) in a render, with the sample
    flags (-amorphous_*, -density, -MW, -molecules, -water, -detector_thick), the table
    mutated by row (out of order, repeated, one row, odd values) or bytes."""
    data = stol_bytes(rng)
    flag = rng.choice(["-stol", "-stol", "-4stol", "-Q"])
    args = BASE + [flag, "in.stol", "-floatfile", "f.bin"]
    args += rng.choice([[], [], ["-amorphous_size", "0.2"], ["-density", "0.9", "-MW", "20"],
                        ["-molecules", "1e16"], ["-water", "10"], ["-detector_thick", "300", "-detector_abs", "500"],
                        ["-amorphous_thick", "0", "-amorphous_height", "1e300"], ["-gradient", "distance"],
                        ["-oversample", "3"], ["-dispersion", "2"], ["-roi", "2", "5", "2", "5"]])
    return Case(maybe_mutate_args(rng, args, ctx["flags"], 0.25), {"in.stol": data})


def t_nonbragg_stol(rng, ctx):
    """nanobragg nonbragg on a mutated .stol table (-stol, -4stol or -Q), all four outputs."""
    data = stol_bytes(rng)
    flag = rng.choice(["-stol", "-stol", "-4stol", "-Q"])
    args = ["nonbragg", flag, "in.stol", "-lambda", "1", "-distance", "100", "-detpixels", "32", "-pixel", "0.5",
            "-fluence", "1e20", "-seed", "1", "-floatfile", "f.bin", "-intfile", "i.img", "-pgmfile", "p.pgm",
            "-noisefile", "n.img"]
    args += rng.choice([[], [], ["-stolout", "bins.stol"], ["-oversample", "2"], ["-dispersion", "2", "-dispsteps", "3"]])
    return Case(maybe_mutate_args(rng, args, ctx["nonbragg_flags"], 0.2), {"in.stol": data})


def t_nonbragg(rng, ctx):
    """nanobragg nonbragg with a golden nonBragg command line (detector cut to 64 pixels),
    its arguments mutated with nonBragg's flags (which match as substrings), sometimes its
    table, source file or -img mutated too."""
    args = list(rng.choice(ctx["nonbragg_goldens"]))
    files = {n: nonbragg_input(n) for n in re.findall(r"inputs/([^ ]+)", " ".join(args))}
    args = ["nonbragg"] + [a.replace("inputs/", "") for a in args]
    if files and rng.random() < 0.3:
        n = rng.choice(sorted(files))
        files[n] = mutate_bytes(rng, files[n])
    flags = ctx["nonbragg_flags"] + ["-img", "-ignore", "-stolout", "-noreject", "-Fmap", "-roi", "-polar",
                                     "-nopolar", "-curved_det", "-point_pixel", "-twotheta", "-pivot",
                                     "-printout_pixel", "-seed", "-adc", "-gain", "-scale", "-pgmscale",
                                     "-4stol", "-Q", "-molecules", "-detpixels_f", "-ORGX", "-close_distance"]
    args = ["nonbragg"] + mutate_args(rng, args[1:], flags)
    return Case(args, files)


def dataset_spec(rng, files, valid=False):
    """A dataset spec as ordered tables of key -> TOML text; files it names are added."""
    base = ["-default_F", "100", "-cell", "100", "100", "100", "90", "90", "90", "-lambda", "6.2",
            "-pixel", "0.1", "-distance", "100", "-detpixels", str(rng.choice([8, 16])), "-fluence", "1e24"]
    extra = rng.choice([[], [], ["-nonoise"], ["-readout_noise", "2", "-psf", "gauss"], ["-dtype", "float32"],
                        ["-nxmx_compression", "deflate"], ["-nxmx_compression", "bslz4"], ["-mosaic_domains", "2"],
                        ["-stol", "w.stol"], ["-spectrum", "a.lam"], ["-gain", "2", "-calibration", "0.01"],
                        ["-expt", "in.expt"], ["-geom", "in.geom"], ["-hkl", "in.hkl"]])
    if "-expt" in extra:
        files["in.expt"] = expt_bytes(rng, rng.choice([1, 2]), mutate=0 if valid else 0.1)
        base = base[:11] + ["-fluence", "1e24"]
    if "-geom" in extra:
        files["in.geom"] = geom_bytes(rng, rng.choice([1, 2]), mutate=0 if valid else 0.1)
        base = base[:11] + ["-fluence", "1e24"]
    if "-stol" in extra:
        files["w.stol"] = nonbragg_input("unity.stol")
    if "-hkl" in extra:
        files["in.hkl"] = golden_input("pattern6.hkl")
    if "-spectrum" in extra:
        files["a.lam"] = spectrum_bytes(rng, mutate=0)
    args = base + extra
    top = {"args": json.dumps(" ".join(args)) if rng.random() < 0.7 else json.dumps(args),
           "shots": str(rng.randint(1, 4)), "seed": str(rng.randint(0, 9))}
    if rng.random() < 0.9:
        top["output"] = '"out"'
    if rng.random() < 0.8:
        top["name"] = '"ds"'
    if rng.random() < 0.5:
        top["shots_per_file"] = str(rng.randint(0, 3))
    if rng.random() < 0.3:
        top["noiseless"] = rng.choice(["true", "false"])
    tables = {"": top}
    if rng.random() < 0.4:
        tables["orientation"] = {"random": rng.choice(["true", "false"])}
    if rng.random() < 0.5:
        tables["crystal"] = rng.choice([{"n_cells": rng.choice(["[2, 4]", "3", "[1, 1]"])},
                                        {"size_um": rng.choice(["[0.5, 1]", "0.8"])}])
        tables["crystal"]["mosaic_deg"] = rng.choice(["[0.0, 0.1]", "0.05", "0"])
    if rng.random() < 0.4:
        tables["fluence"] = {"jitter": rng.choice(["0.1", "0", "0.5"])}
    if rng.random() < 0.5:
        if rng.random() < 0.6:
            tables["spectrum"] = {"model": '"sase"', "channels": str(rng.randint(2, 4)),
                                  "bandwidth": rng.choice(["0.003", "0.01"]), "spikes": str(rng.randint(1, 3)),
                                  "spike_width": "2e-4"}
        else:
            names = rng.choice([["a.lam"], ["a.lam", "b.lam"]])
            for n in names:
                files[n] = spectrum_bytes(rng, mutate=0)
            tables["spectrum"] = {"model": '"files"', "files": json.dumps(names)}
    if rng.random() < 0.4:
        tables["background"] = {"water_um": rng.choice(["[0, 10]", "5", "0"])}
    return tables


def mutate_spec(rng, tables, files, flags):
    """A spec's values replaced by odd TOML values, keys removed, unknown keys added, tables
    duplicated, its args mutated (output flags, missing files), the spectrum files mutated."""
    tables = copy.deepcopy(tables)
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        t = rng.choice(sorted(tables))
        if kind in (0, 1, 2) and tables[t]:
            k = rng.choice(sorted(tables[t]))
            tables[t][k] = rng.choice(TOML_SPECIAL)
        elif kind == 3 and tables[t]:
            del tables[t][rng.choice(sorted(tables[t]))]
        elif kind == 4:  # an unknown key, or a known one in the wrong table
            tables[t][rng.choice(["whatever", "shots", "model", "jitter", "n_cells", "channels", "files",
                                  "random", "water_um", "args"])] = rng.choice(TOML_SPECIAL)
        elif kind == 5:  # the args mutated, or given an output flag
            try:
                args = json.loads(tables[""].get("args", '""'))
            except ValueError:
                args = ""
            args = args.split() if isinstance(args, str) else [str(x) for x in args] if isinstance(args, list) else []
            args = mutate_args(rng, args, flags + ["-floatfile", "-batch", "-gradient", "-nxmxfile", "-printout"])
            tables[""]["args"] = json.dumps(" ".join(args) if rng.random() < 0.7 else args)
        elif kind == 6:  # a table made from nothing, or the spectrum's model changed
            name = rng.choice(["spectrum", "crystal", "fluence", "background", "orientation", "nosuch"])
            tables.setdefault(name, {})["model"] = rng.choice(['"sase"', '"files"', '"laser"', "1"])
            if name == "spectrum" and rng.random() < 0.5:
                tables[name]["channels"] = rng.choice(["0", "100000", "100001", "1000", "-1"])
                tables[name]["spikes"] = rng.choice(["0", "10000", "10001", "1"])
        else:  # the spectrum files' contents mutated or missing
            for n in [n for n in files if n.endswith(".lam")]:
                if rng.random() < 0.5:
                    files[n] = mutate_bytes(rng, files[n])
                elif rng.random() < 0.3:
                    del files[n]
    return tables


def spec_text(tables):
    out = []
    for t, kv in tables.items():
        if t:
            out.append(f"\n[{t}]")
        out += [f"{k} = {v}" for k, v in kv.items()]
    return ("\n".join(out) + "\n").encode()


def dataset_flags(rng, resume, odd=0.2):
    f = ["-threads", "1"] if rng.random() < 0.9 else []
    if resume:
        f.append("-resume")
    if rng.random() < 0.1:
        f += ["-shard", rng.choice(["0/1", "0/2", "1/2"])]
    elif rng.random() < odd:
        f += ["-shard", rng.choice(["0/1", "0/2", "1/2", "2/2", "1/0", "-1/2", "a/b", "0", "18446744073709551615/18446744073709551616", "0/100000000"])]
    if rng.random() < odd / 2:
        f += rng.choice([["-device", "cpu"], ["-device", "cuda"], ["-device", "auto"], ["-device", "x"], ["-progress"],
                         ["-noprogress"], ["-threads", "0"], ["-threads", "-1"], ["-threads", "1025"], ["-resume"]])
    return f


def mutate_outdir(rng, d):
    """Changes a dataset's output folder: a file corrupted, truncated, emptied, renamed to
    another worker's, part or resumed run's name (or a name that only looks like one),
    copied (a shot in two files), replaced by a folder, link or FIFO; temporaries planted
    (this host's dead or live process, another host's); the folder itself replaced."""
    out = os.path.join(d, "out")
    if not os.path.isdir(out):
        return
    nxs = sorted(n for n in os.listdir(out) if n.endswith(".nxs"))
    for _ in range(rng.randint(1, 2)):
        kind = rng.randrange(11)
        name = rng.choice(nxs) if nxs else "ds_00000.nxs"
        path = os.path.join(out, name)
        data = open(path, "rb").read() if os.path.isfile(path) and not os.path.islink(path) else b""
        if kind == 0 and data:  # corrupted
            open(path, "wb").write(mutate_bytes(rng, data))
        elif kind == 1 and data:  # truncated
            open(path, "wb").write(data[:rng.choice([0, 8, 512, len(data) // 2, len(data) - 1])])
        elif kind == 2 and os.path.exists(path):  # renamed
            new = rng.choice(["ds_00003.nxs", "ds_00001_000.nxs", "ds_00000_resume1.nxs", "ds_00000_resume1_000.nxs",
                              "ds_00000.nxs", "ds_99999999999999999999.nxs", "ds_-1.nxs", "DS_00000.nxs",
                              "ds_00000_resume0.nxs", "ds_0.nxs", "ds_00000.nxs.bak", "ds__00000.nxs",
                              "ds_00000_resume99999999999999999999_001.nxs", "ds_00000_999.nxs"])
            os.replace(path, os.path.join(out, new))
        elif kind == 3 and data:  # copied to another worker's or part's name
            new = rng.choice(["ds_00001.nxs", "ds_00000_resume1.nxs", "ds_00000_005.nxs", "other_00000.nxs"])
            open(os.path.join(out, new), "wb").write(data)
        elif kind == 4:  # a temporary of a dead process of this host, a live one's, another host's
            pid = rng.choice([DEAD_PID, 1, DEAD_PID - 7])
            host = rng.choice([HOST, HOST, "otherhost", "", "a.b", HOST + ".x"])
            tmp = f".{name}.tmp.{host}.{pid}.{rng.randint(0, 3)}"
            content = rng.choice([data[: len(data) // 2], b"", b"\0" * 100])
            open(os.path.join(out, tmp), "wb").write(content)
            if rng.random() < 0.2:
                open(os.path.join(out, f".{name}.tmp.{HOST}.notapid.0"), "wb").write(b"x")
        elif kind == 5:  # a folder, a link or a FIFO where a file is
            if os.path.lexists(path):
                os.remove(path) if not os.path.isdir(path) or os.path.islink(path) else shutil.rmtree(path)
            which = rng.randrange(5)
            if which == 0:
                os.mkdir(path)
            elif which == 1:
                os.symlink("/dev/zero" if rng.random() < 0.5 else "/nonexistent/x.nxs", path)
            elif which == 2:
                os.symlink(rng.choice(nxs) if nxs else "self.nxs", path)
            elif which == 3 and rng.random() < 0.3:  # rarely: a FIFO blocks a reader that opens it
                os.mkfifo(path)
            else:
                open(path, "wb").write(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
        elif kind == 6 and data:  # read-only
            os.chmod(path, 0o444)
        elif kind == 7:  # another file in the folder
            junk = rng.choice(["notes.txt", ".hidden", "ds_00000.nxs.tmp", ".ds_00000.nxs.tmp.x", "ds_00000.h5"])
            open(os.path.join(out, junk), "wb").write(b"junk")
        elif kind == 8:  # the folder replaced by a file, or removed
            shutil.rmtree(out)
            if rng.random() < 0.5:
                open(out, "wb").write(b"not a folder")
            return
        elif kind == 9 and data:  # the spec's digest kept but a frame's shot index flipped (bytes)
            b = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b) // 2, len(b))] ^= 1 << rng.randrange(8)
            open(path, "wb").write(bytes(b))
        elif kind == 10 and os.path.exists(path):
            os.remove(path)
        nxs = sorted(n for n in os.listdir(out) if n.endswith(".nxs")) if os.path.isdir(out) else []


def t_dataset(rng, ctx):
    """nanobragg dataset with a tiny spec (1-4 shots of 8 or 16 pixels a side, sometimes a
    multi-panel detector, SASE or file spectra, water, crystal and fluence draws), the spec
    mutated by value, key or table (or bytes), with odd -shard/-threads/-device flags."""
    files = {}
    tables = dataset_spec(rng, files)
    if rng.random() < 0.75:
        tables = mutate_spec(rng, tables, files, ctx["flags"])
    text = spec_text(tables)
    if rng.random() < 0.15:
        text = mutate_bytes(rng, text)
    files["set.toml"] = text
    args = ["dataset", "set.toml"] + dataset_flags(rng, rng.random() < 0.2)
    return Case(maybe_mutate_args(rng, args, ["-shard", "-resume", "-threads", "-device", "-progress"], 0.1), files)


def t_dataset_resume(rng, ctx):
    """nanobragg dataset rendered, its output folder then mutated (corrupted, truncated,
    renamed, duplicated or foreign .nxs files, planted temporaries, links, folders), or
    first filled by a run of another spec or by -nxmxfile renders, then run again with
    -resume (sometimes without, sometimes from another shard or a changed spec)."""
    files = {}
    tables = dataset_spec(rng, files, valid=True)
    files["set.toml"] = spec_text(tables)
    first = ["dataset", "set.toml", "-threads", "1"]
    case = Case(None, files)
    mode = rng.randrange(4)
    if mode == 0:  # a run of another spec into the same folder
        other = copy.deepcopy(tables)
        other[""]["seed"] = str(int(other[""]["seed"]) + 1)
        case.files["other.toml"] = spec_text(other)
        case.step(["dataset", "other.toml", "-threads", "1"])
    elif mode == 1:  # single renders written under the dataset's names
        name = json.loads(tables[""].get("name", '"set"'))
        for n in rng.sample([f"{name}_00000.nxs", f"{name}_00001.nxs", f"{name}_00000_000.nxs",
                             f"{name}_00000_resume1.nxs"], rng.randint(1, 2)):
            case.step(BASE[:-1] + ["16", "-nonoise", "-nopgm", "-floatfile", "f.bin", "-nxmxfile", "out/" + n])
        case.dirs.append("out")
    else:  # a run of the same spec, perhaps of one shard, then the folder mutated
        if rng.random() < 0.2:
            first += ["-shard", rng.choice(["0/2", "1/2"])]
        case.step(first, hook=mutate_outdir if mode == 2 else None)
        if mode == 3:
            case.steps[-1]["hook"] = lambda r, d: (mutate_outdir(r, d), mutate_spec_file(r, d))
    case.step(["dataset", "set.toml"] + dataset_flags(rng, rng.random() < 0.85, odd=0.05))
    return case


def mutate_spec_file(rng, d):
    """Edits set.toml between a run and its resume (a changed digest; or only a comment)."""
    path = os.path.join(d, "set.toml")
    text = open(path, "rb").read()
    text = rng.choice([text + b"# a comment\n", text.replace(b"shots = ", b"shots = 1"), text + b"\n",
                       mutate_bytes(rng, text), text.replace(b"seed = ", b"seed = 2")])
    open(path, "wb").write(text)


OUTPUT_EXT = {"-floatfile": ".bin", "-intfile": ".img", "-noisefile": ".img", "-pgmfile": ".pgm",
              "-nxmxfile": ".nxs", "-cbffile": ".cbf", "-gradfile": ""}
DEFAULT_OUTPUTS = {"-floatfile": "floatimage.bin", "-intfile": "intimage.img", "-noisefile": "noiseimage.img",
                   "-pgmfile": "image.pgm"}


def known(path):
    return f"KNOWN CONTENT of {path}\n".encode()


def t_outputs(rng, ctx):
    """Several outputs of one run (a render, perhaps of two panels or a -batch; noisify;
    nonbragg), one or two of them bad: a folder, a missing folder, a path through a regular
    file, /dev/full, an existing read-only file. Every output path that is a regular file
    (and every other file in the folder) holds known content first; when the run fails,
    every such file must still hold it ("replaced" otherwise)."""
    kind = rng.choices(["render", "expt", "batch", "noisify", "nonbragg"], weights=[5, 2, 2, 2, 2])[0]
    files = {}
    if kind == "noisify":
        base = ["noisify", "-floatfile", "in.bin", "-seed", "1"] + rng.choice([[], ["-psf", "gauss"], ["-readout", "2"]])
        flags = ["-intfile", "-noisefile", "-pgmfile"]
        files["in.bin"] = float_image(1024)
        defaults = {}
    elif kind == "nonbragg":
        base = ["nonbragg", "-stol", "in.stol", "-lambda", "1", "-distance", "100", "-detpixels", "16", "-pixel", "1",
                "-fluence", "1e20", "-seed", "1"]
        flags = ["-floatfile", "-intfile", "-pgmfile", "-noisefile"]
        files["in.stol"] = nonbragg_input("unity.stol")
        defaults = dict(DEFAULT_OUTPUTS)
    else:
        base = BASE[:-1] + ["16"]
        if kind == "expt":
            base = ["-default_F", "100", "-N", "3", "-expt", "in.expt"]
            files["in.expt"] = expt_bytes(rng, 2, mutate=0)
        if kind == "batch":
            base = base + ["-batch", "shots.txt"]
            files["shots.txt"] = b"0 0 0\n1 2 3\n"
        flags = ["-floatfile", "-intfile", "-noisefile", "-pgmfile"]
        if kind == "render":
            flags += ["-nxmxfile", "-cbffile", "-gradfile"]
        elif kind == "expt":
            flags += ["-nxmxfile"]
        defaults = dict(DEFAULT_OUTPUTS)
    chosen = rng.sample(flags, rng.randint(min(2, len(flags)), len(flags)))
    nbad = 1 if rng.random() < 0.85 else 2
    bad = set(rng.sample(chosen, min(nbad, len(chosen))))
    dirs, modes, immutable = [], {}, []
    paths = {}
    for k, flag in enumerate(chosen):
        ext = OUTPUT_EXT[flag]
        if flag in bad:
            how = rng.choice(["folder", "missing", "through", "full", "readonly", "immutable"])
            if how == "folder":
                p = f"isdir{k}{ext}"
                dirs.append(p)
                if rng.random() < 0.3:
                    p += "/"
            elif how == "missing":
                p = f"nodir/o{k}{ext}"
            elif how == "through":
                files["afile"] = known("afile")
                p = f"afile/o{k}{ext}"
            elif how == "full":
                p = "/dev/full"
            else:  # (root may write a read-only file: an immutable one is refused to root too)
                p = f"ro{k}{ext}"
                files[p] = known(p)
                modes[p] = 0o444
                if how == "immutable" and ctx.get("chattr"):
                    immutable.append(p)
        else:
            p = rng.choice([f"o{k}{ext}", f"sub/o{k}{ext}", f"./o{k}{ext}"])
            if p.startswith("sub/"):
                dirs.append("sub")
        paths[flag] = p
    if len(chosen) > 2 and rng.random() < 0.1:  # two outputs at one path
        a, b = rng.sample(chosen, 2)
        paths[b] = paths[a]
    args = list(base)
    pairs = [[f, paths[f]] for f in chosen]
    if "-gradfile" in paths:
        pairs.append(["-gradient", "distance,cell_a"])
    rng.shuffle(pairs)
    for pr in pairs:
        args += pr
    if rng.random() < 0.2:
        args += rng.choice([["-nonoise"], ["-nopgm"], ["-nonoise", "-nopgm"]])
    # the run's output files: named, default names and batch/gradient names
    outs = [p for f, p in paths.items() if f != "-gradfile"]
    outs += [p for f, p in defaults.items() if f not in paths]
    if "-gradfile" in paths:
        outs += [paths["-gradfile"] + "_distance.bin", paths["-gradfile"] + "_cell_a.bin"]
    if kind == "batch":
        outs = [re.sub(r"(\.[a-z]+)?$", lambda m: f"_{s:05d}" + (m.group(1) or ""), p, count=1)
                for p in outs for s in (1, 2)] + outs
    for p in outs:
        p = os.path.normpath(p)
        parent = os.path.dirname(p)
        if p.startswith("/") or p in files or any(p == x or p.startswith(x + "/") for x in dirs if x != "sub"):
            continue
        if parent and (parent != "sub" or "sub" not in dirs):
            continue
        if rng.random() < 0.85:
            files[p] = known(p)
    if rng.random() < 0.15:
        args = mutate_args(rng, args, ctx["flags"] if kind != "nonbragg" else ctx["nonbragg_flags"])
    case = Case(args, files)
    case.dirs, case.modes, case.immutable = sorted(set(dirs)), modes, immutable
    case.check_outputs = True
    return case


PY_PRELUDE = r'''
import copy, pickle, sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import nanobragg as nb
ALLOWED = (nb.Error, ValueError, TypeError)
errors = 0
def step(what, f):
    global errors
    try:
        return f()
    except ALLOWED as e:
        errors += 1
        print(f"error: {what}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    except BaseException as e:
        print(f"FUZZ-UNEXPECTED {type(e).__module__}.{type(e).__qualname__} in {what}: {str(e)[:300]}", file=sys.stderr)
        sys.stderr.flush()
        sys.exit(3)
'''

PY_HKL = ["np.array([[0,0,0],[1,2,3],[-1,0,2]])", "np.array([[0,0,0],[1,2,3],[-1,0,2]], dtype=np.int32)",
          "np.array([[0.5,0,0],[1,2,3],[-1,0,2]])", "np.array([[2**40,0,0],[1,2,3],[-1,0,2]], dtype=np.int64)",
          "np.array([[2**62,-2**62,0],[1,2,3],[-1,0,2]], dtype=np.int64)", "np.array([[1e300,0,0],[1,2,3],[-1,0,2]])",
          "np.array([[np.nan,0,0],[1,2,3],[-1,0,2]])", "np.array([[np.inf,0,0],[1,2,3],[-1,0,2]])",
          "np.array([[1000,1000,1000],[-1000,-1000,-1000],[0,0,0]])", "np.array([[3000,0,0],[-3000,0,0],[0,0,0]])",
          "np.zeros((3,2))", "np.zeros((3,4))", "np.zeros((0,3))", "np.zeros((3,3,1))", "np.zeros(3)",
          "[[0,0,0],[1,1,1],[2,2,2]]", "np.arange(9).reshape(3,3)[:, ::-1]", "np.asfortranarray(np.arange(9).reshape(3,3))",
          "np.array([['a','b','c']]*3)", "np.array([[True,False,True]]*3)", "np.full((3,3), 2**64-1, dtype=np.uint64)",
          "np.zeros((3,3), dtype=np.float16)", "np.zeros((3,3), dtype=object)", "None", "3", "np.zeros((3,3), dtype=np.complex128)",
          "np.array([[-2**31,0,0],[2**31-1,0,0],[0,0,0]], dtype=np.int32)"]
PY_F = ["np.array([1.0, 2.0, 3.0])", "np.array([np.nan, 1, 2])", "np.array([np.inf, 1, 2])", "np.array([-1.0, 1, 2])",
        "np.array([1+2j, 1, 2])", "np.array([1,2,3], dtype=np.complex64)", "np.array([1.0, 2.0])", "np.array([])",
        "np.float64(3)", "[1, 2, 3]", "np.array([1e308, 1e308, 1e308])", "np.array([[1,2,3]])", "np.array([1,2,3], dtype=np.uint8)",
        "np.array([1,2,3], dtype=np.float16)", "np.array(['1','2','3'])", "np.ones(3)[::-1]", "np.ones(6)[::2]", "None",
        "np.array([1,2,3], dtype=object)", "np.array([1e-320, 0, 0])", "np.ones(4)"]
PY_OBS = ["np.ones(m.shape)", "np.full(m.shape, np.nan)", "np.ones((3,3))", "np.ones(m.shape[::-1])",
          "np.ones(m.shape, dtype=np.uint16)", "np.ones(m.shape, dtype=np.complex128)", "np.ones(m.shape, dtype=bool)",
          "np.ones(m.shape[0]*m.shape[1])", "np.ones((1,)+tuple(m.shape))", "np.full(m.shape, -1.0)", "np.full(m.shape, np.inf)",
          "np.ones(m.shape)[::-1]", "np.asfortranarray(np.ones(m.shape))", "np.zeros((0,0))", "[[1]]", "None",
          "np.ones((m.shape[0], 2*m.shape[1]))[:, ::2]", "np.zeros(m.shape, dtype=np.float32)", "np.full(m.shape, 1e308)",
          "nb.simulate(m)", "np.ones(m.shape, dtype=np.int64) * 2**62", "np.broadcast_to(np.float64(1), m.shape)"]
PY_SKIP = ["None", "np.zeros(m.shape, bool)", "np.ones(m.shape, bool)", "np.ones((2,2), bool)", "3", "np.full(m.shape, 2)",
           "np.zeros(m.shape)", "np.full(m.shape, np.nan)"]
PY_NAMES = ['["distance"]', '["distance", "cell_a"]', '["Xbeam", "Ybeam", "misset_x"]', '["nosuch"]', "[]",
            '["distance", "distance"]', '["fluence"]', '["Na", "Nb"]', '["lambda"]', '"distance"', "[1, 2]",
            '["close_distance@0"]', '["Xbeam@*"]', '["Xbeam@9"]', '["mosaic"]', '["water"]', '["default_F"]', "None"]
PY_VALUES = ["p.start", "p.start * 2", "np.full(len(p.start), np.nan)", "np.zeros(len(p.start))",
             "np.full(len(p.start), 1e300)", "np.zeros(len(p.start) + 1)", "[]", "None", "-p.start",
             "np.array(p.start, dtype=np.float32)", "np.array(p.start) + 1j", "np.full(len(p.start), -np.inf)",
             "np.array(p.start)[::-1]", "np.zeros((len(p.start), 1))"]
PY_DTYPE = ['"float64"', '"float32"', '"exact"', '"float16"', '""', '"FLOAT32"', "None", "3", '"f8"']
PY_DEVICE = ['"cpu"', '"cpu"', '"cuda"', '"auto"', '"gpu"', '""', "None", '"cpu:0"']
PY_THREADS = ["None", "None", "0", "1", "2", "-1", "2**31", "2**64", "1.5", '"2"', "True", "1025"]
PY_NUM = ["0", "-1", "1", "float('nan')", "float('inf')", "-float('inf')", "1e300", "1e-300", "2**63", "2**64", "-2**63",
          '"1"', "None", "1.5", "True", "1+1j"]


def t_python(rng, ctx):
    """The Python package (`python -c`): from_args on a mutated command line (one string or
    a list), then calls with odd arguments: simulate/render (dtype, device, threads),
    Image.int_image/noise_image, values set by name, set_flags, set_structure_factors (NaN,
    complex, wrong shapes, huge indices), structure_factors, Params image/loss/vjp/jvp (odd
    observations, skips, values), jacobian, refine, copy and pickle, read_image on mutated
    SMV, CBF and NXmx files. Failures: an exception other than nanobragg.Error, ValueError
    and TypeError, a panic, a signal."""
    files = {}
    variant = rng.randrange(5)
    args = list(BASE)
    if variant == 1:
        args += ["-hkl", "in.hkl"]
        files["in.hkl"] = golden_input(rng.choice(["pattern6.hkl", "sparse.hkl", "single_003.hkl"]))
        args[1] = "0"
    elif variant == 2:
        args = ["-default_F", "100", "-N", "3"] + CELL + ["-expt", "in.expt"]
        files["in.expt"] = expt_bytes(rng, rng.choice([1, 2]), mutate=0.2)
    elif variant == 3:
        args = ["-default_F", "100", "-N", "3"] + CELL + ["-geom", "in.geom"]
        files["in.geom"] = geom_bytes(rng, rng.choice([1, 2]), mutate=0.2)
    args = maybe_mutate_args(rng, args, ctx["flags"], 0.4)
    arg_expr = repr(" ".join(args)) if rng.random() < 0.6 else repr(args)
    lines = [PY_PRELUDE, f"m = step('from_args', lambda: nb.from_args({arg_expr}))", "if m is not None:"]
    body = []
    for _ in range(rng.randint(2, 6)):
        op = rng.randrange(12)
        if op == 0:
            body.append(f"step('simulate', lambda: nb.simulate(m, dtype={rng.choice(PY_DTYPE)}, "
                        f"device={rng.choice(PY_DEVICE)}, threads={rng.choice(PY_THREADS)}))")
        elif op == 1:
            body.append(f"img = step('render', lambda: nb.render(m, dtype={rng.choice(PY_DTYPE)}, threads={rng.choice(PY_THREADS)}))")
            body.append("if img is not None:")
            body.append(f"    step('int_image', lambda: img.int_image(scale={rng.choice(PY_NUM)}, adc={rng.choice(PY_NUM)}))")
            body.append(f"    step('noise_image', lambda: img.noise_image(seed={rng.choice(PY_NUM)}, adc={rng.choice(PY_NUM)}))")
            body.append("    step('stats', lambda: (img.stats, img.float, img.seconds))")
        elif op == 2:
            name = rng.choice(PARAMS + ["nosuch", "", "distance@0", "Xbeam@*", "Xbeam@0", "close_distance@1"])
            body.append(f"step('setitem', lambda: m.__setitem__({name!r}, {rng.choice(PY_NUM)}))")
            body.append(f"step('getitem', lambda: m[{name!r}])")
        elif op == 3:
            flags = mutate_args(rng, rng.choice([["-oversample", "2"], ["-phisteps", "2", "-osc", "0.1"], ["-N", "4"]]), ctx["flags"])
            body.append(f"step('set_flags', lambda: m.set_flags({' '.join(flags)!r}))")
        elif op == 4:
            body.append(f"step('set_structure_factors', lambda: m.set_structure_factors({rng.choice(PY_HKL)}, {rng.choice(PY_F)}))")
            body.append("step('structure_factors', lambda: m.structure_factors)")
            if rng.random() < 0.5:
                body.append("step('simulate after F', lambda: nb.simulate(m))")
        elif op in (5, 6):
            body.append(f"p = step('Params', lambda: nb.Params(m, {rng.choice(PY_NAMES)}, threads={rng.choice(PY_THREADS)}"
                        + (f", F={rng.choice(PY_F)}" if rng.random() < 0.2 else "") + "))")
            body.append("if p is not None:")
            body.append(f"    step('loss', lambda: p.loss({rng.choice(PY_VALUES)}, {rng.choice(PY_OBS)}, "
                        f"loss={rng.choice(['sse', 'poisson', '', 'SSE', 'huber', None, 3])!r}, skip={rng.choice(PY_SKIP)}))")
            body.append(f"    step('image', lambda: p.image({rng.choice(PY_VALUES)}))")
            body.append(f"    step('vjp', lambda: p.vjp({rng.choice(PY_VALUES)}, {rng.choice(PY_OBS)}))")
            body.append(f"    step('jvp', lambda: p.jvp({rng.choice(PY_VALUES)}, {rng.choice(PY_VALUES)}))")
        elif op == 7:
            body.append(f"step('jacobian', lambda: nb.jacobian(m, {rng.choice(PY_NAMES)}, dtype={rng.choice(PY_DTYPE)}, "
                        f"threads={rng.choice(PY_THREADS)}))")
        elif op == 8:
            body.append(f"step('refine', lambda: nb.refine(m, {rng.choice(PY_OBS)}, {rng.choice(PY_NAMES)}, "
                        f"maxiter={rng.choice(['0', '1', '2', '-1', '2**63'])}))")
        elif op == 9:
            body.append("c = step('deepcopy', lambda: copy.deepcopy(m))")
            body.append("q = step('pickle', lambda: pickle.loads(pickle.dumps(m)))")
            body.append("if q is not None: step('simulate copy', lambda: nb.simulate(q))")
        elif op == 10:
            body.append(f"step('shape', lambda: (m.shape, m.parameters, m.args, repr(m)))")
        else:
            body.append(f"step('read_image', lambda: nb.read_image({rng.choice(['in.img', 'x.cbf', 'x.nxs', 'x.img', '/dev/null', 'nonexistent', '.', 'in.hkl'])!r}, "
                        f"frame={rng.choice(['0', '0', '1', '-1', '2**63', '2**64', repr('0'), 'None'])}))")
    lines += ["    " + b for b in body]
    lines.append("sys.exit(1 if errors else 0)")
    script = "\n".join(lines) + "\n"
    files["in.img"] = maybe_mutate_bytes(rng, smv_image(), 0.7)
    case = Case(None, files)
    if rng.random() < 0.5:  # the binary's own CBF, NXmx and SMV files, then one mutated
        def hook(r, d):
            n = r.choice(["x.cbf", "x.nxs", "x.img"])
            p = os.path.join(d, n)
            if os.path.isfile(p):
                data = open(p, "rb").read()
                open(p, "wb").write(mutate_bytes(r, data) if r.random() < 0.8 else data)
        case.step(BASE[:-1] + ["16", "-nopgm", "-floatfile", "x.bin", "-cbffile", "x.cbf", "-nxmxfile", "x.nxs",
                               "-noisefile", "x.img", "-seed", "1"] + rng.choice([[], ["-nxmx_compression", "bslz4"],
                                                                                   ["-nxmx_compression", "deflate"]]),
                  hook=hook)
    case.step(["-c", script], python=True)
    return case


def targets():
    """Each target: (weight, builder(rng, ctx) -> Case). Builders' docstrings say what each covers."""
    hkl = golden_input("p1_tric.hkl")
    return {
        "args": (6, t_args),
        "hkl": legacy(2, BASE + ["-hkl", "in.hkl"], {"in.hkl": hkl}, "in.hkl"),
        "mat": legacy(1, BASE + ["-mat", "in.mat"], {"in.mat": golden_input("tric.mat")}, "in.mat"),
        "sourcefile": legacy(1, BASE + ["-sourcefile", "src.txt"], {"src.txt": golden_input("sources3.txt")}, "src.txt"),
        "img": legacy(1, BASE[:-2] + ["-img", "in.img"], {"in.img": smv_image()}, "in.img"),
        "mask": legacy(1, BASE + ["-mask", "mask.img"], {"mask.img": smv_image()}, "mask.img"),
        "fdump": legacy(1, BASE[2:] + ["-dump", "Fdump.bin"], {"Fdump.bin": fdump_bytes()}, "Fdump.bin"),
        "batch": legacy(1, BASE + ["-batch", "shots.txt", "-floatfile", "s.bin"], {"shots.txt": b"0 0 0\n1 2 3\n10 20 30\n"}, "shots.txt"),
        "gradient": legacy(1, BASE + ["-gradient", "distance,Xbeam,cell_a", "-gradfile", "g"], {}, None),
        "noisify": legacy(2, ["noisify", "-floatfile", "in.bin", "-seed", "1", "-psf", "gauss", "-readout", "2",
                              "-intfile", "i.img", "-noisefile", "n.img", "-pgmfile", "p.pgm"],
                          {"in.bin": float_image(1024)}, "in.bin"),
        "noisify-header": legacy(1, ["noisify", "-floatfile", "in.bin", "-header", "h.img", "-seed", "2"],
                                 {"in.bin": float_image(1024, 3.0), "h.img": smv_image()}, "h.img"),
        "add": legacy(1, ["add", "a.bin", "b.bin", "-floatfile", "sum.bin", "-scale", "1,2"],
                      {"a.bin": float_image(64, 1.0), "b.bin": float_image(64, 2.0)}, "b.bin"),
        "refine": legacy(1, ["refine", "-observed", "obs.bin", "-refine", "distance,Xbeam", "-maxiter", "3"] + BASE,
                         {"obs.bin": float_image(1024, 1.0)}, "obs.bin"),
        "expt": (3, t_expt),
        "geom": (3, t_geom),
        "spectrum": (2, t_spectrum),
        "stol": (2, t_stol),
        "nonbragg-stol": (2, t_nonbragg_stol),
        "nonbragg": (3, t_nonbragg),
        "dataset": (3, t_dataset),
        "dataset-resume": (3, t_dataset_resume),
        "outputs": (4, t_outputs),
        "python": (3, t_python),
    }


NEW_TARGETS = ["expt", "geom", "spectrum", "stol", "nonbragg-stol", "nonbragg", "dataset", "dataset-resume",
               "outputs", "python"]


# ---------------------------------------------------------------------------------------------
# running

def limits(as_limit):
    resource.setrlimit(resource.RLIMIT_AS, (as_limit, as_limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.setsid()


def tree(root):
    """Every entry under root (links not followed): relative path -> lstat result."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            try:
                out[os.path.relpath(p, root)] = os.lstat(p)
            except OSError:
                pass
    return out


def snapshot(root):
    """The directory as a reproducer's state (files over 1 MiB left out)."""
    s = {"files": {}, "dirs": [], "links": {}, "fifos": [], "modes": {}}
    for rel, st in sorted(tree(root).items()):
        p = os.path.join(root, rel)
        if stat.S_ISLNK(st.st_mode):
            s["links"][rel] = os.readlink(p)
        elif stat.S_ISDIR(st.st_mode):
            s["dirs"].append(rel)
        elif stat.S_ISFIFO(st.st_mode):
            s["fifos"].append(rel)
        elif stat.S_ISREG(st.st_mode) and st.st_size < 1 << 20:
            with open(p, "rb") as f:
                s["files"][rel] = f.read()
            if not st.st_mode & 0o200:
                s["modes"][rel] = stat.S_IMODE(st.st_mode)
    return s


def materialize(root, s):
    for rel in s["dirs"]:
        os.makedirs(os.path.join(root, rel), exist_ok=True)
    for rel, data in s["files"].items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
    for rel, target in s["links"].items():
        os.symlink(target, os.path.join(root, rel))
    for rel in s["fifos"]:
        os.mkfifo(os.path.join(root, rel))
    for rel, mode in s["modes"].items():
        os.chmod(os.path.join(root, rel), mode)
    if s.get("immutable"):
        subprocess.run(["chattr", "+i"] + [os.path.join(root, rel) for rel in s["immutable"]],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def chattr_works():
    """Whether immutable files can be made here (root, chattr, a filesystem that has them)."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return False
    d = tempfile.mkdtemp(prefix="nbfuzz-")
    p = os.path.join(d, "f")
    open(p, "w").close()
    ok = subprocess.run(["chattr", "+i", p], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["chattr", "-i", p], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)
    return ok


def regular_contents(root):
    out = {}
    for rel, st in tree(root).items():
        if stat.S_ISREG(st.st_mode):
            try:
                with open(os.path.join(root, rel), "rb") as f:
                    out[rel] = f.read()
            except OSError:
                pass
    return out


def execute(argv, cwd, timeout, python):
    """Runs one command; returns (category, detail, exit code or None)."""
    env = dict(os.environ, RAYON_NUM_THREADS="1", RUST_BACKTRACE="0", PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env,
                         preexec_fn=lambda: limits(PY_AS_LIMIT if python else AS_LIMIT))
    timed_out = threading.Event()

    def kill():
        timed_out.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    err = p.stderr.read(1 << 16)
    p.stderr.close()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = 0  # reaped above
    timer.cancel()
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    text = err.decode("utf-8", "replace")
    if timed_out.is_set():
        return ("hang" if cpu < 0.2 * wall else "slow"), f"{wall:.1f} s wall, {cpu:.1f} s cpu", None
    if os.WIFSIGNALED(status):
        return "crash", f"signal {os.WTERMSIG(status)}: {text[-300:]}", None
    code = os.WEXITSTATUS(status)
    if code == 101 or "panicked at" in text or "PanicException" in text:
        return "panic", text[-500:], code
    if "memory allocation of" in text:
        return "crash", text[-300:], code
    if python and "FUZZ-UNEXPECTED" in text:
        line = [ln for ln in text.splitlines() if ln.startswith("FUZZ-UNEXPECTED")][-1]
        return "unclear", line[:500], code
    if code == 0:
        return "ok", "", code
    if code == 1 and re.search(r"^error:", text, re.M):
        return "error", "", code
    return "unclear", f"exit {code}: {text[-300:]}", code


def run_case(binary, python, case, timeout, hook_seed):
    """Runs a case's steps in a fresh directory; returns (category, detail, failing step's
    index, the directory's state before it). The first failure ends the case."""
    d = tempfile.mkdtemp(prefix="nbfuzz-")
    root = os.path.join(d, "run")  # the parent catches paths that climb out of it
    os.mkdir(root)
    result = ("ok", "", len(case.steps) - 1, None)
    try:
        materialize(root, case.state())
        for k, st in enumerate(case.steps):
            last = k == len(case.steps) - 1
            before = snapshot(root)
            entries = set(tree(root))
            kept = regular_contents(root) if last and case.check_outputs else {}
            if st["python"]:
                if python is None:
                    return "skipped", "no Python interpreter imports nanobragg", k, before
                argv = [python] + st["args"]
            else:
                argv = [binary] + st["args"]
            category, detail, code = execute(argv, root, timeout, st["python"])
            after = tree(root)
            stray = [n for n in after if n not in entries and os.path.basename(n).startswith(".")
                     and (".tmp" in os.path.basename(n) or ".old." in os.path.basename(n))]
            if category not in ("hang", "slow", "crash", "panic") and code not in (None, 0) and kept:
                changed = []
                for rel, data in kept.items():
                    p = os.path.join(root, rel)
                    try:
                        same = stat.S_ISREG(os.lstat(p).st_mode) and open(p, "rb").read() == data
                    except OSError:
                        same = False
                    if not same:
                        changed.append(rel)
                if changed:
                    category, detail = "replaced", f"exit {code}; changed: {', '.join(sorted(changed))}"
            if category in ("ok", "error", "unclear") and stray:
                category, detail = "stray", ", ".join(stray)
            result = (category, detail, k, before)
            if category not in ("ok", "error"):
                return result
            if st["hook"] is not None:
                try:
                    st["hook"](random.Random(f"{hook_seed}:{k}"), root)
                except OSError:
                    pass
        return result
    finally:
        if case.immutable:
            subprocess.run(["chattr", "-i"] + [os.path.join(root, rel) for rel in case.immutable],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for dirpath, dirnames, _ in os.walk(d):
            for n in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, n), 0o755)
                except OSError:
                    pass
        shutil.rmtree(d, ignore_errors=True)


def case(seed, i, table, ctx):
    """Execution i: its target and case (depends only on seed, i and the table's targets)."""
    rng = random.Random(f"{seed}:{i}")
    names = list(table)
    name = rng.choices(names, weights=[table[n][0] for n in names])[0]
    return name, table[name][1](rng, ctx)


def known_flags(binary):
    text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    flags = sorted(set(re.findall(r"^  (-[A-Za-z_][A-Za-z_0-9]*)", text, re.M)))
    return flags + ["-refine", "-observed", "-maxiter", "-history", "-loss", "-gtol"]


def nonbragg_flags(binary):
    p = subprocess.run([binary, "nonbragg", "-h"], capture_output=True, text=True)
    return sorted(set(re.findall(r"^\t(-[A-Za-z_][A-Za-z_0-9]*)", p.stdout + p.stderr, re.M)))


def find_python(given):
    """The first interpreter that imports nanobragg: --python, python3, a venv's."""
    # (a path made absolute: the runs start in directories of their own)
    given = os.path.abspath(given) if given and os.sep in given else given
    candidates = [given] if given else [sys.executable, "python3", "/tmp/venv/bin/python",
                                        os.path.join(ROOT, "target", "pyenv", "bin", "python")]
    for c in candidates:
        try:
            if subprocess.run([c, "-c", "import nanobragg, numpy"], capture_output=True, timeout=60).returncode == 0:
                return c
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


def save(out, i, seed, name, category, detail, args, step, state, python, immutable):
    rec = {"index": i, "seed": seed, "target": name, "category": category, "detail": detail,
           "program": "python" if python else "nanobragg", "step": step, "args": args,
           "files": {k: base64.b64encode(v).decode() for k, v in state["files"].items()},
           "dirs": state["dirs"], "links": state["links"], "fifos": state["fifos"], "modes": state["modes"],
           "immutable": immutable}
    with open(os.path.join(out, f"{category}-{i}.json"), "w") as f:
        json.dump(rec, f, indent=1)


def replay(path, binary, python, timeout):
    """Runs a reproducer's command in its saved directory; prints the category."""
    rec = json.load(open(path))
    c = Case(rec["args"], {k: base64.b64decode(v) for k, v in rec["files"].items()},
             python=rec.get("program") == "python")
    c.dirs, c.links = rec.get("dirs", []), rec.get("links", {})
    c.fifos, c.modes, c.immutable = rec.get("fifos", []), rec.get("modes", {}), rec.get("immutable", [])
    c.check_outputs = rec.get("category") == "replaced"
    category, detail, _, _ = run_case(binary, python, c, timeout, "replay")
    print(json.dumps({"reproducer": path, "was": rec["category"], "now": category, "detail": detail}, indent=1))
    return category


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "nanobragg"))
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first execution index")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S)
    ap.add_argument("--seconds", type=float, default=0, help="stop starting executions after this long (0: no limit)")
    ap.add_argument("--targets", default="all",
                    help="comma-separated target names, 'all' or 'new' (the targets added for -expt, -geom, "
                         "-spectrum, -stol, nonbragg, dataset, outputs, python)")
    ap.add_argument("--python", help="interpreter for the python target (default: the first that imports nanobragg)")
    ap.add_argument("--replay", metavar="FILE", help="run one reproducer again and exit")
    ap.add_argument("--out", default="fuzz-out")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    table = targets()
    if a.replay:
        rec = json.load(open(a.replay))
        python = find_python(a.python) if rec.get("program") == "python" else None
        category = replay(a.replay, binary, python, a.timeout)
        sys.exit(0 if category in ("ok", "error") else 1)
    chosen = []
    for t in a.targets.split(","):
        t = t.strip()
        chosen += list(table) if t == "all" else NEW_TARGETS if t == "new" else [t]
    unknown = [t for t in chosen if t not in table]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; targets: {', '.join(table)}")
    python = find_python(a.python) if "python" in chosen else None
    notes = []
    if "python" in chosen and python is None:
        notes.append("python target skipped: no interpreter imports nanobragg (python3, /tmp/venv/bin/python, "
                     "target/pyenv/bin/python; give one with --python)")
        print(notes[-1], file=sys.stderr)
        chosen = [t for t in chosen if t != "python"]
        if not chosen:
            sys.exit(0)
    table = {n: table[n] for n in table if n in chosen}
    os.makedirs(a.out, exist_ok=True)
    ctx = {"goldens": golden_args(), "flags": known_flags(binary), "nonbragg_goldens": golden_nonbragg_args(),
           "nonbragg_flags": nonbragg_flags(binary), "chattr": chattr_works()}
    counts = {}
    lock = threading.Lock()
    t0 = time.monotonic()

    def work(i):
        if a.seconds and time.monotonic() - t0 > a.seconds:
            return
        name, c = case(a.seed, i, table, ctx)
        category, detail, step, state = run_case(binary, python, c, a.timeout, f"{a.seed}:{i}:hook")
        with lock:
            cnt = counts.setdefault(name, {})
            cnt[category] = cnt.get(category, 0) + 1
            if category not in ("ok", "error", "skipped"):
                st = c.steps[step]
                save(a.out, i, a.seed, name, category, detail, st["args"], step, state, st["python"],
                     c.immutable if step == len(c.steps) - 1 else [])
            done = sum(sum(v.values()) for v in counts.values())
            if done % 500 == 0:
                print(f"{done} runs, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:  # at most a few executions queued at a time
        pending = set()
        for i in range(a.start, a.start + a.runs):
            if a.seconds and time.monotonic() - t0 > a.seconds:
                break
            pending.add(pool.submit(work, i))
            if len(pending) >= 4 * a.jobs:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    f.result()
        for f in pending:
            f.result()
    failures = {k: sum(c.get(k, 0) for c in counts.values()) for k in FAILURES}
    done = sum(sum(v.values()) for v in counts.values())
    summary = {"seed": a.seed, "start": a.start, "runs": done, "seconds": round(time.monotonic() - t0),
               "targets": list(table), "per_target": counts, "failures": failures}
    if notes:
        summary["notes"] = notes
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{'target':<16}{'runs':>7}" + "".join(f"{k:>9}" for k in FAILURES), file=sys.stderr)
    for name, cnt in counts.items():
        print(f"{name:<16}{sum(cnt.values()):>7}" + "".join(f"{cnt.get(k, 0):>9}" for k in FAILURES), file=sys.stderr)
    print(json.dumps(summary, indent=1))
    bad = sum(v for k, v in failures.items() if k != "slow")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
