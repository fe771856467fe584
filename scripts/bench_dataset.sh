#!/usr/bin/env bash
# The LS49-like dataset benchmark: images/s of `nanobragg dataset` against the C
# nanoBragg in one run. Each shot: 3000×3000 pixels of 0.11 mm, a 100-channel
# spectrum, 25 mosaic domains, water background, Poisson noise (and for nanobragg a
# Gaussian PSF, read-out noise and a fresh random orientation, spectrum, size and
# fluence per shot), written to disk: an NXmx file per worker for nanobragg; the C
# program's float, SMV and noise images, one command per image.
#
#   NB_C=/path/nanoBragg scripts/bench_dataset.sh
#
# The C program is not built here: compile it yourself from github:bl831/nanoBragg
# (e.g. `gcc -O3 -fopenmp -o nanoBragg nanoBragg.c -lm`). Without it only nanobragg runs.
# Knobs: NB_BIN (default target/release/nanobragg, built if missing), SHOTS (nanobragg
# shots per run, default 4), C_SHOTS (C images, default 1), PIXELS (default 3000),
# BENCH_THREADS (default: all cores; OMP_NUM_THREADS for C), BENCH_DIR (scratch),
# DEVICE (cpu, the default, or cuda), DTYPES (default "float32 float64").
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
nb="${NB_BIN:-$root/target/release/nanobragg}"
[[ -n "${NB_BIN:-}" ]] || cargo build --release -q -p nanobragg-cli
shots="${SHOTS:-4}"
c_shots="${C_SHOTS:-1}"
pixels="${PIXELS:-3000}"
threads="${BENCH_THREADS:-$(nproc)}"
device="${DEVICE:-cpu}"
work="${BENCH_DIR:-$(mktemp -d)}"
mkdir -p "$work"
cp tests/golden/inputs/p1_tric.hkl "$work/"
cd "$work"
export OMP_NUM_THREADS="$threads"

# the model both programs render (a triclinic P1 crystal, structure factors from a file)
model="-hkl p1_tric.hkl -cell 67.2 59.8 47.2 90 110.3 90 -N 20 -lambda 1.3 -distance 150 \
-detpixels $pixels -pixel 0.11 -mosaic 0.05 -mosaic_domains 25 -water 100 -oversample 1 \
-flux 1e12 -exposure 0.05 -beamsize 0.003"

now() { date +%s.%N; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.3f images/s (%.1f s each)", n / s, s / n }'; }

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "workload: ${pixels}x${pixels} pixels, 100 channels, 25 mosaic domains, water, noise"
declare -A seconds
for dtype in ${DTYPES:-float32 float64}; do
    cat > "set_$dtype.toml" <<SPEC
args = "$model -dtype $dtype -readout_noise 3 -psf gauss -psf_fwhm 60"
shots = $shots
seed = 1
output = "out_$dtype"
[crystal]
n_cells = [15, 25]
[fluence]
jitter = 0.1
[spectrum]
model = "sase"
channels = 100
[background]
water_um = [50, 150]
SPEC
    rm -rf "out_$dtype"
    t0=$(now)
    "$nb" dataset "set_$dtype.toml" -threads "$threads" -device "$device" -noprogress >/dev/null
    t1=$(now)
    seconds[$dtype]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    echo "nanobragg dataset ($dtype, $device): $shots shots: $(rate "$shots" "${seconds[$dtype]}")"
done

if [[ -n "${NB_C:-}" ]]; then
    t0=$(now)
    for i in $(seq 1 "$c_shots"); do
        rm -f float.bin int.img noise.img
        "$NB_C" $model -dispersion 0.3 -dispsteps 100 -misset random -misset_seed "$i" \
            -seed "$i" -floatfile float.bin -intfile int.img -noisefile noise.img -nopgm \
            >/dev/null 2>&1
    done
    t1=$(now)
    c=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    echo "C nanoBragg (OMP_NUM_THREADS=$threads): $c_shots images: $(rate "$c_shots" "$c")"
    for dtype in "${!seconds[@]}"; do
        awk -v c="$c" -v cn="$c_shots" -v s="${seconds[$dtype]}" -v n="$shots" -v d="$dtype" \
            'BEGIN { printf "nanobragg %s / C: %.1fx the images per second\n", d, (n / s) / (cn / c) }'
    done
fi
