//! `-batch FILE`: many shots of one experiment that differ in orientation.
//!
//! Each line of the file holds three misset angles (deg, about x, y, z) that
//! replace `-misset` for one shot. Every shot's plan is resolved on the host
//! (cheap: nothing per pixel); on the GPU the static arrays are uploaded once
//! and only the rotated cells change between shots, with copy-back overlapped
//! with the next shot's compute.

use crate::invocation::Invocation;
use anyhow::{anyhow, bail, Context, Result};
use nanobragg_core::config::Misset;
use nanobragg_core::render::{cpu, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_io::cfmt::g;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Read the misset angles, one shot per non-blank line (`#` starts a comment).
pub fn read_batch(path: &Path) -> Result<Vec<[f64; 3]>> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow!("-batch {}: {e}", path.display()))?;
    let mut shots = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let vals: Vec<f64> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .map(|t| t.parse::<f64>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                anyhow!("-batch {} line {}: expected three angles (deg)", path.display(), n + 1)
            })?;
        if vals.len() != 3 || vals.iter().any(|v| !v.is_finite()) {
            bail!("-batch {} line {}: expected three finite angles (deg)", path.display(), n + 1);
        }
        shots.push([vals[0], vals[1], vals[2]]);
    }
    if shots.is_empty() {
        bail!("-batch {}: no shots in the file", path.display());
    }
    Ok(shots)
}

/// The float image name of shot `i` (1-based): `<stem>_NNNNN<.ext>`.
pub fn shot_path(floatfile: &Path, i: usize) -> PathBuf {
    let stem = floatfile.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match floatfile.extension() {
        Some(ext) => format!("{stem}_{i:05}.{}", ext.to_string_lossy()),
        None => format!("{stem}_{i:05}"),
    };
    floatfile.with_file_name(name)
}

/// Render every shot of a batch and write its float image.
pub fn run_batch(inv: &Invocation, batch: &Path, seeds: SetupSeeds) -> Result<()> {
    let angles = read_batch(batch)?;
    let mut plans = Vec::with_capacity(angles.len());
    for a in &angles {
        let mut cfg = inv.config.clone();
        cfg.crystal.misset = Misset::Angles(*a);
        plans.push(Plan::new(&cfg, seeds).context("-batch")?);
    }
    let gpu = inv.uses_gpu();
    let out = std::io::stdout();
    let mut out = out.lock();
    let start = Instant::now();
    let mut write_shot = |i: usize, image: &[f32]| -> Result<()> {
        let path = shot_path(&inv.outputs.floatfile, i + 1);
        crate::render::check_finite_image(image, inv, &plans[i])
            .map_err(|e| anyhow!("-batch shot {}: {e}", i + 1))?;
        let max = image.iter().fold(0.0f32, |m, &v| m.max(v));
        nanobragg_io::float::write_float_image(&path, image)
            .map_err(|e| anyhow!("-floatfile {}: {e}", path.display()))?;
        let a = angles[i];
        writeln!(
            out,
            "shot {}: misset {} {} {} deg, max_I = {}, wrote {}",
            i + 1,
            g(a[0]),
            g(a[1]),
            g(a[2]),
            g(max as f64),
            path.display()
        )?;
        Ok(())
    };
    if gpu {
        let mut renderer = nanobragg_cuda::GpuRenderer::new(&plans[0], inv.precision)
            .map_err(|e| anyhow!("-device cuda: {e}"))?;
        let shots: Vec<nanobragg_cuda::Shot> =
            plans.iter().map(nanobragg_cuda::Shot::from_plan).collect();
        let mut failure = None;
        renderer
            .render_batch_with(&shots, |i, img| {
                if failure.is_none() {
                    // the pixel of C's first phi sweep, where there is one
                    let mut fixed = None;
                    if plans[i].first_sweep_cells.is_some() {
                        let mut copy = img.to_vec();
                        cpu::put_first_sweep(&plans[i], inv.precision, &mut copy, None);
                        fixed = Some(copy);
                    }
                    failure = write_shot(i, fixed.as_deref().unwrap_or(img)).err();
                }
            })
            .map_err(|e| anyhow!("-device cuda: {e}"))?;
        if let Some(e) = failure {
            return Err(e);
        }
    } else {
        // (the precision -exact included, which the GPU kernel lacks)
        let opts = RenderOptions { threads: inv.threads };
        for (i, plan) in plans.iter().enumerate() {
            write_shot(i, &cpu::render_precision(plan, opts, inv.precision).image)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    writeln!(
        out,
        "rendered {} shots in {} s ({} images/s) on the {}",
        angles.len(),
        g(secs),
        g(angles.len() as f64 / secs),
        if gpu { "GPU" } else { "CPU" }
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shot_names() {
        assert_eq!(shot_path(Path::new("d/float.bin"), 3), PathBuf::from("d/float_00003.bin"));
        assert_eq!(shot_path(Path::new("img"), 12), PathBuf::from("img_00012"));
    }
}
