#!/usr/bin/env bash
# Realistic-image benchmark, side by side in one hyperfine run per case:
#   1. nonbragg at 2048²: `nanobragg nonbragg` against the C nonBragg (NB_NONBRAGG_C);
#   2. noisify at 2048²: `nanobragg noisify` against the C noisify (NB_NOISIFY_C), on the
#      float image of case 1;
#   3. the 4096² bench render of scripts/bench.sh alone, with the amorphous background
#      (-stol), with the Poisson noise image, and with both plus a detector response.
#
#   NB_NONBRAGG_C=/path/nonBragg NB_NOISIFY_C=/path/noisify scripts/bench_realistic.sh
#
# The C programs are not built here: compile them yourself from github:bl831/nanoBragg
# (e.g. `gcc -O2 -fopenmp -o nonBragg nonBragg.c -lm`). Without them only nanobragg runs.
# Knobs: NB_BIN (default target/release/nanobragg, built if missing), BENCH_RUNS (default 5),
# BENCH_THREADS (default: all cores; OMP_NUM_THREADS for C), BENCH_DIR (scratch directory).
# Every timed run writes new files (hyperfine --prepare removes them).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v hyperfine >/dev/null || { echo "bench_realistic.sh: hyperfine not found" >&2; exit 1; }
nb="${NB_BIN:-$root/target/release/nanobragg}"
[[ -n "${NB_BIN:-}" ]] || cargo build --release -q -p nanobragg-cli
runs="${BENCH_RUNS:-5}"
threads="${BENCH_THREADS:-$(nproc)}"
work="${BENCH_DIR:-$(mktemp -d)}"
mkdir -p "$work"
cp tests/golden-nonbragg/inputs/water.stol "$work/"
cd "$work"
export OMP_NUM_THREADS="$threads" RAYON_NUM_THREADS="$threads"
clean="rm -f float.bin int.img noise.img image.pgm bg.bin"

stol="-stol water.stol -lambda 1.0 -distance 100 -detpixels 2048 -pixel 0.1 -flux 1e11 \
-exposure 0.5 -beamsize 0.1 -seed 101 -floatfile bg.bin -intfile int.img -noisefile noise.img -nopgm"
cmds=(-n "nanobragg nonbragg" "$nb nonbragg $stol")
[[ -n "${NB_NONBRAGG_C:-}" ]] && cmds+=(-n "C nonBragg" "$NB_NONBRAGG_C $stol")
echo "== nonbragg 2048²"
hyperfine -N --style basic --warmup 1 --runs "$runs" --prepare "$clean" "${cmds[@]}"

"$nb" nonbragg $stol -nonoise >/dev/null
noisify="-floatfile bg.bin -seed 1 -intfile int.img -noisefile noise.img -nopgm"
cmds=(-n "nanobragg noisify" "$nb noisify $noisify")
cmds+=(-n "nanobragg noisify -noise_rng parallel" "$nb noisify $noisify -noise_rng parallel")
cmds+=(-n "nanobragg noisify -noise_rng parallel, Gaussian PSF" \
    "$nb noisify $noisify -noise_rng parallel -psf gauss -psf_fwhm 100")
[[ -n "${NB_NOISIFY_C:-}" ]] && cmds+=(-n "C noisify" "$NB_NOISIFY_C $noisify") \
    && cmds+=(-n "C noisify, Gaussian PSF" "$NB_NOISIFY_C $noisify -psf gauss -psf_fwhm 100")
echo "== noisify 2048² (defaults: Poisson, 3 % calibration error)"
hyperfine -N --style basic --warmup 1 --runs "$runs" --prepare "rm -f int.img noise.img" "${cmds[@]}"

bench="-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5 -distance 100 \
-detpixels 4096 -nopgm -floatfile float.bin -threads $threads"
echo "== 4096² bench render: background and detector response"
hyperfine -N --style basic --warmup 1 --runs "$runs" --prepare "$clean" \
    -n "render" "$nb $bench -nonoise" \
    -n "render + background" "$nb $bench -nonoise -stol water.stol" \
    -n "render + background, -exact" "$nb $bench -nonoise -stol water.stol -exact" \
    -n "render + noise" "$nb $bench -noisefile noise.img" \
    -n "render + noise, parallel stream" "$nb $bench -noisefile noise.img -noise_rng parallel" \
    -n "render + background + noise + response" \
    "$nb $bench -stol water.stol -noisefile noise.img -readout 3 -gain 1.2" \
    -n "render + background + noise + response, parallel stream" \
    "$nb $bench -stol water.stol -noisefile noise.img -readout 3 -gain 1.2 -noise_rng parallel" \
    -n "render + background + noise + response + Gaussian PSF, parallel stream" \
    "$nb $bench -stol water.stol -noisefile noise.img -readout 3 -gain 1.2 -psf gauss -psf_fwhm 100 -noise_rng parallel"
