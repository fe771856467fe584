#!/usr/bin/env python3
"""Seeded mutation fuzzing of the nanobragg command line and its input files.

Each execution takes a known-good run (a golden case's command line, or a
run built around one input file: -hkl, -mat, -sourcefile, -img, -mask, an
Fdump, -batch, -gradient, refine, noisify, add), mutates its arguments or the input's
bytes, and runs the binary in a fresh directory under a wall-clock limit, an
address-space limit and a file-size limit (SIGXFSZ ignored, so an oversized
write is a write error, as on a full disk). Execution i depends only on the
seed and i.

Failures counted, per target:
  panic   exit status 101 or "panicked at" on stderr
  crash   ended by a signal (abort, segfault, ...) or an allocation failure
  hang    past the time limit having used < 20 % of a core (blocked: a pipe,
          a lock); runs past the limit while computing are counted as "slow"
  stray   a temporary (a hidden ".*.tmp*" file) left in the run's directory
  unclear exit status 1 without a line starting "error:" on stderr
Every failure is saved as a reproducer (arguments and input files) under
--out. The summary is printed and written to OUT/summary.json; the exit
status is 1 when any failure was found.

    scripts/fuzz.py --bin target/release/nanobragg --runs 100000 --seed 1
"""

import argparse
import base64
import json
import os
import random
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
BASE = "-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -pixel 0.1 -distance 100 -detpixels 32".split()
SPECIAL = ["0", "-0", "1", "-1", "2", "0.5", "90", "180", "360", "1e300", "-1e300", "1e-300", "nan",
           "inf", "-inf", "9223372036854775807", "18446744073709551615", "-9223372036854775808",
           "4294967297", "1e9", "100000000", "", " ", "0x10", "1,2", "1e", "--", "-", "\x1b[31mred",
           "\ufeff1", "abc", "all", "/dev/null", "/dev/zero", "nonexistent/dir/f", "..", "."]
PARAMS = ("distance close_distance Xbeam Ybeam detector_rotx detector_roty detector_rotz twotheta "
          "cell_a cell_b cell_c cell_alpha cell_beta cell_gamma misset_x misset_y misset_z Na Nb Nc "
          "mosaic phi osc lambda dispersion divergence polar fluence water default_F fudge").split()
TIMEOUT_S = 20.0
AS_LIMIT = 4 << 30
FSIZE_LIMIT = 64 << 20


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


def golden_input(name):
    with open(os.path.join(GOLDEN, "inputs", name), "rb") as f:
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


# Each target: (weight, base arguments, {file name: bytes}, the file that is mutated or None)
def targets():
    hkl = golden_input("p1_tric.hkl")
    return {
        "args": (6, None, {}, None),
        "hkl": (2, BASE + ["-hkl", "in.hkl"], {"in.hkl": hkl}, "in.hkl"),
        "mat": (1, BASE + ["-mat", "in.mat"], {"in.mat": golden_input("tric.mat")}, "in.mat"),
        "sourcefile": (1, BASE + ["-sourcefile", "src.txt"], {"src.txt": golden_input("sources3.txt")}, "src.txt"),
        "img": (1, BASE[:-2] + ["-img", "in.img"], {"in.img": smv_image()}, "in.img"),
        "mask": (1, BASE + ["-mask", "mask.img"], {"mask.img": smv_image()}, "mask.img"),
        "fdump": (1, BASE[2:] + ["-dump", "Fdump.bin"], {"Fdump.bin": fdump_bytes()}, "Fdump.bin"),
        "batch": (1, BASE + ["-batch", "shots.txt", "-floatfile", "s.bin"], {"shots.txt": b"0 0 0\n1 2 3\n10 20 30\n"}, "shots.txt"),
        "gradient": (1, BASE + ["-gradient", "distance,Xbeam,cell_a", "-gradfile", "g"], {}, None),
        "noisify": (2, ["noisify", "-floatfile", "in.bin", "-seed", "1", "-psf", "gauss", "-readout", "2",
                        "-intfile", "i.img", "-noisefile", "n.img", "-pgmfile", "p.pgm"],
                    {"in.bin": struct.pack("<1024f", *[float(i % 50) for i in range(1024)])}, "in.bin"),
        "noisify-header": (1, ["noisify", "-floatfile", "in.bin", "-header", "h.img", "-seed", "2"],
                           {"in.bin": struct.pack("<1024f", *([3.0] * 1024)), "h.img": smv_image()}, "h.img"),
        "add": (1, ["add", "a.bin", "b.bin", "-floatfile", "sum.bin", "-scale", "1,2"],
                {"a.bin": struct.pack("<64f", *([1.0] * 64)), "b.bin": struct.pack("<64f", *([2.0] * 64))}, "b.bin"),
        "refine": (1, ["refine", "-observed", "obs.bin", "-refine", "distance,Xbeam", "-maxiter", "3"] + BASE,
                   {"obs.bin": struct.pack("<1024f", *([1.0] * 1024))}, "obs.bin"),
    }


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


def limits():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.setsid()


def run_one(binary, args, files, timeout):
    """Runs one case in a fresh directory; returns (category, detail)."""
    d = tempfile.mkdtemp(prefix="nbfuzz-")
    try:
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        before = set(os.listdir(d))
        env = dict(os.environ, RAYON_NUM_THREADS="1", RUST_BACKTRACE="0")
        start = time.monotonic()
        p = subprocess.Popen([binary] + args, cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env, preexec_fn=limits)
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
        stray = [n for n in os.listdir(d) if n not in before and n.startswith(".") and ".tmp" in n]
        if timed_out.is_set():
            return ("hang" if cpu < 0.2 * wall else "slow"), f"{wall:.1f} s wall, {cpu:.1f} s cpu"
        if os.WIFSIGNALED(status):
            return "crash", f"signal {os.WTERMSIG(status)}: {text[-300:]}"
        code = os.WEXITSTATUS(status)
        if code == 101 or "panicked at" in text:
            return "panic", text[-500:]
        if "memory allocation of" in text:
            return "crash", text[-300:]
        if stray:
            return "stray", ", ".join(stray)
        if code == 0:
            return "ok", ""
        if code == 1 and re.search(r"^error:", text, re.M):
            return "error", ""
        return "unclear", f"exit {code}: {text[-300:]}"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def case(seed, i, table, goldens, flags):
    """Execution i: its target, arguments and files (depends only on seed and i)."""
    rng = random.Random(f"{seed}:{i}")
    names = list(table)
    name = rng.choices(names, weights=[table[n][0] for n in names])[0]
    _, args, files, mutated = table[name]
    files = dict(files)
    if args is None:
        args = list(rng.choice(goldens))
        needed = re.findall(r"inputs/([^ ]+)", " ".join(args))
        for n in needed:
            files[n] = golden_input(n)
        args = [a.replace("inputs/", "") for a in args]
    if mutated and rng.random() < 0.7:
        files[mutated] = mutate_bytes(rng, files[mutated])
    if mutated is None or rng.random() < 0.3:
        args = mutate_args(rng, args, flags)
    return name, args, files


def known_flags(binary):
    text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    flags = sorted(set(re.findall(r"^  (-[A-Za-z_][A-Za-z_0-9]*)", text, re.M)))
    return flags + ["-refine", "-observed", "-maxiter", "-history", "-loss", "-gtol"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "nanobragg"))
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first execution index")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S)
    ap.add_argument("--out", default="fuzz-out")
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    os.makedirs(a.out, exist_ok=True)
    table, goldens, flags = targets(), golden_args(), known_flags(binary)
    counts = {}
    lock = threading.Lock()
    t0 = time.monotonic()

    def work(i):
        name, args, files = case(a.seed, i, table, goldens, flags)
        category, detail = run_one(binary, args, files, a.timeout)
        with lock:
            c = counts.setdefault(name, {})
            c[category] = c.get(category, 0) + 1
            if category not in ("ok", "error"):
                with open(os.path.join(a.out, f"{category}-{i}.json"), "w") as f:
                    json.dump({"index": i, "seed": a.seed, "target": name, "category": category,
                               "detail": detail, "args": args,
                               "files": {k: base64.b64encode(v).decode() for k, v in files.items()
                                         if len(v) < 1 << 20}}, f, indent=1)
            done = sum(sum(v.values()) for v in counts.values())
            if done % 1000 == 0:
                print(f"{done} runs, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(work, range(a.start, a.start + a.runs)))
    failures = {k: sum(c.get(k, 0) for c in counts.values())
                for k in ("panic", "crash", "hang", "stray", "unclear", "slow")}
    summary = {"seed": a.seed, "start": a.start, "runs": a.runs, "seconds": round(time.monotonic() - t0),
               "per_target": counts, "failures": failures}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    bad = sum(v for k, v in failures.items() if k != "slow")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
