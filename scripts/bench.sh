#!/usr/bin/env bash
# Whole-program benchmark of nanobragg against the C nanoBragg, side by side.
#
#   scripts/bench.sh                      # nanobragg only
#   NB_C_BIN=/path/to/nanoBragg scripts/bench.sh
#   NB_BASE_BIN=/path/to/old/nanobragg scripts/bench.sh   # against a previous build
#
# Times (hyperfine, medians) each case with nanobragg in f64 and f32 and, when NB_BASE_BIN
# names a previous nanobragg build or NB_C_BIN a C binary, with those in the same hyperfine
# run; then measures the peak RSS of each command once (/usr/bin/time, or bash's getrusage
# fallback). Prints a table (with the ratios nanobragg/base and C/nanobragg) and writes JSON.
# Every timed run writes new files: the outputs are removed before each one.
#
# Cases: the bench crystal at each size,
#   -default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 -detpixels N
#   -nonoise -nopgm -floatfile float.bin
# the golden case `comprehensive` (its arguments are read from tests/golden/cases.toml), and
# `sources`, the dataset's load: structure factors from an -hkl table, 100 wavelengths x 25
# mosaic domains per pixel (f32 should take well under f64's time on it),
#   -hkl tests/golden/inputs/p1_tric.hkl -cell 67.2 59.8 47.2 90 110.3 90 -N 20 -lambda 1.3
#   -distance 150 -detpixels 256 -pixel 0.11 -oversample 1 -dispersion 0.3 -dispsteps 100
#   -mosaic 0.05 -mosaic_domains 25 -nonoise -nopgm -floatfile float.bin
#
# Knobs (environment):
#   NB_C_BIN       C binary to compare with (unset: nanobragg only)
#   NB_BASE_BIN    a previous nanobragg binary to time side by side (unset: none)
#   NB_BIN         nanobragg binary (default: target/release/nanobragg, built if missing)
#   BENCH_SIZES    detector sizes (default "512 1024 2048 4096")
#   BENCH_CASES    "bench comprehensive sources" (default all three)
#   BENCH_THREADS  threads for both programs (default: all cores; OMP_NUM_THREADS for C)
#   BENCH_RUNS     timed runs per command (default 5; one warm-up run is added)
#   BENCH_JSON     where to write the JSON (default target/bench/bench.json)
#   BENCH_DIR      scratch directory the programs write into (default: a fresh temp dir)
# Requires hyperfine (`apt-get install hyperfine` or `cargo install hyperfine`) and python3.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

command -v hyperfine >/dev/null || { echo "bench.sh: hyperfine not found" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench.sh: python3 not found" >&2; exit 1; }

nb="${NB_BIN:-$root/target/release/nanobragg}"
if [[ -z "${NB_BIN:-}" ]]; then
    cargo build --release -q -p nanobragg-cli
fi
[[ -x "$nb" ]] || { echo "bench.sh: $nb is not executable" >&2; exit 1; }
c_bin="${NB_C_BIN:-}"
if [[ -n "$c_bin" && ! -x "$c_bin" ]]; then
    echo "bench.sh: NB_C_BIN=$c_bin is not executable" >&2
    exit 1
fi
[[ -n "$c_bin" ]] && c_bin="$(cd "$(dirname "$c_bin")" && pwd)/$(basename "$c_bin")"
base_bin="${NB_BASE_BIN:-}"
if [[ -n "$base_bin" ]]; then
    [[ -x "$base_bin" ]] || { echo "bench.sh: NB_BASE_BIN=$base_bin is not executable" >&2; exit 1; }
    base_bin="$(cd "$(dirname "$base_bin")" && pwd)/$(basename "$base_bin")"
fi
nb="$(cd "$(dirname "$nb")" && pwd)/$(basename "$nb")"

sizes="${BENCH_SIZES:-512 1024 2048 4096}"
cases="${BENCH_CASES:-bench comprehensive sources}"
runs="${BENCH_RUNS:-5}"
threads="${BENCH_THREADS:-$(nproc)}"
json="${BENCH_JSON:-$root/target/bench/bench.json}"
mkdir -p "$(dirname "$json")"
json="$(cd "$(dirname "$json")" && pwd)/$(basename "$json")"
work="${BENCH_DIR:-$(mktemp -d)}"
mkdir -p "$work"
raw="$work/raw"
mkdir -p "$raw"

comprehensive_args() {
    python3 - "$root/tests/golden/cases.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r'id = "comprehensive"\s*\n(?:.*\n)*?args = "([^"]*)"', text)
print(m.group(1) if m else "")
PY
}

# peak RSS (KiB) of one run of a command
peak_rss() {
    if [[ -x /usr/bin/time ]]; then
        /usr/bin/time -f "%M" -o "$work/.rss" "$@" >/dev/null 2>&1 || true
        tail -n 1 "$work/.rss"
    else
        # getrusage of the waited-for child, through python
        python3 -c 'import resource,subprocess,sys
subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
    fi
}

# one benchmark: name, args...; writes $raw/<name>.json and $raw/<name>.rss
bench_case() {
    local name="$1"
    shift
    local args="$*"
    local cmds=() who=(nanobragg)
    [[ -n "$base_bin" ]] && who+=(base)
    for w in "${who[@]}"; do
        local bin="$nb"
        [[ "$w" == base ]] && bin="$base_bin"
        cmds+=(-n "$w f64" "$bin $args -threads $threads"
            -n "$w f32" "$bin $args -threads $threads -dtype float32")
    done
    if [[ -n "$c_bin" ]]; then
        cmds+=(-n "C" "env OMP_NUM_THREADS=$threads $c_bin $args")
    fi
    # every run writes new files
    local prep=(--prepare "rm -f float.bin intimage.img int.img noise.img noiseimage.img image.pgm")
    echo "== $name" >&2
    (cd "$work" && hyperfine -N --style basic --warmup 1 --runs "$runs" "${prep[@]}" \
        --export-json "$raw/$name.json" "${cmds[@]}" >&2)
    {
        for w in "${who[@]}"; do
            local bin="$nb"
            [[ "$w" == base ]] && bin="$base_bin"
            echo "$w f64 $(cd "$work" && peak_rss "$bin" $args -threads "$threads")"
            echo "$w f32 $(cd "$work" && peak_rss "$bin" $args -threads "$threads" -dtype float32)"
        done
        if [[ -n "$c_bin" ]]; then
            echo "C $(cd "$work" && OMP_NUM_THREADS=$threads peak_rss "$c_bin" $args)"
        fi
    } >"$raw/$name.rss"
}

order=()
for c in $cases; do
    case "$c" in
    bench)
        for n in $sizes; do
            bench_case "bench-$n" -default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 \
                -distance 100 -detpixels "$n" -nonoise -nopgm -floatfile float.bin
            order+=("bench-$n")
        done
        ;;
    comprehensive)
        a="$(comprehensive_args)"
        [[ -n "$a" ]] || { echo "bench.sh: no comprehensive case in cases.toml" >&2; exit 1; }
        # shellcheck disable=SC2086
        bench_case comprehensive $a
        order+=(comprehensive)
        ;;
    sources)
        bench_case sources -hkl "$root/tests/golden/inputs/p1_tric.hkl" \
            -cell 67.2 59.8 47.2 90 110.3 90 -N 20 -lambda 1.3 -distance 150 -detpixels 256 \
            -pixel 0.11 -oversample 1 -dispersion 0.3 -dispsteps 100 -mosaic 0.05 \
            -mosaic_domains 25 -nonoise -nopgm -floatfile float.bin
        order+=(sources)
        ;;
    *)
        echo "bench.sh: unknown case '$c'" >&2
        exit 1
        ;;
    esac
done

python3 - "$raw" "$json" "$threads" "$nb" "${c_bin:-}" "${base_bin:-}" "${order[@]}" <<'PY'
import json, os, platform, subprocess, sys, time
raw, out, threads, nb, c_bin, base_bin, *order = sys.argv[1:]

def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()

rows = []
for name in order:
    res = json.load(open(os.path.join(raw, name + ".json")))["results"]
    med = {r["command"]: r["median"] for r in res}
    rss = {}
    for line in open(os.path.join(raw, name + ".rss")):
        key, _, val = line.strip().rpartition(" ")
        try:
            rss[key] = int(val)
        except ValueError:
            pass
    for dtype in ("f64", "f32"):
        key = "nanobragg " + dtype
        row = {"case": name, "dtype": dtype, "median_s": med[key], "peak_rss_kib": rss.get(key)}
        if "base " + dtype in med:
            row["base_median_s"] = med["base " + dtype]
            row["base_ratio"] = med[key] / med["base " + dtype]
        if "C" in med:
            row["c_median_s"] = med["C"]
            row["speedup"] = med["C"] / med[key]
            row["c_peak_rss_kib"] = rss.get("C")
            if rss.get("C") and rss.get(key):
                row["rss_ratio"] = rss[key] / rss["C"]
        rows.append(row)

doc = {
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "os": platform.platform()},
    "threads": int(threads),
    "nanobragg": nb,
    "c_binary": c_bin or None,
    "base_binary": base_bin or None,
    "results": rows,
}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)

def mb(k):
    return f"{k / 1024:.0f}" if k else "-"

print(f"\nmachine: {doc['machine']['cpu']}, {doc['machine']['cores']} cores; threads {threads}")
hdr = "| case | dtype | nanobragg s | base s | nanobragg/base | C s | C/nanobragg | RSS MiB | C RSS MiB | RSS ratio |"
print(hdr)
print("|" + "---|" * 10)
for r in rows:
    c, b = r.get("c_median_s"), r.get("base_median_s")
    print(
        f"| {r['case']} | {r['dtype']} | {r['median_s']:.3f} | "
        + (f"{b:.3f} | {r['base_ratio']:.3f} | " if b else "- | - | ")
        + (f"{c:.3f} | {r['speedup']:.1f}x | " if c else "- | - | ")
        + f"{mb(r['peak_rss_kib'])} | {mb(r.get('c_peak_rss_kib'))} | "
        + (f"{r['rss_ratio']:.2f} |" if r.get("rss_ratio") else "- |")
    )
# single precision against double, per case: the f32 kernels carry twice the lanes
for name in order:
    t = {r["dtype"]: r["median_s"] for r in rows if r["case"] == name}
    print(f"{name}: f32/f64 = {t['f32'] / t['f64']:.2f}")
print(f"\nJSON: {out}")
PY
