//! `-batch FILE`: many shots of one experiment that differ in orientation;
//! and the experiments of an `-expt` list (dials.stills_process, xia2.ssx),
//! one shot each, written the same way.
//!
//! Each line of the file holds three misset angles (deg, about x, y, z) that
//! replace `-misset` for one shot. Every shot's plan is resolved on the host
//! (cheap: nothing per pixel); on the GPU the static arrays are uploaded once
//! and only the rotated cells change between shots, with copy-back overlapped
//! with the next shot's compute. Every shot's outputs (float image; int, PGM
//! and noise images where their flags are given) are checked, free space
//! included, before the first shot is rendered (see docs/compat.md).

use crate::image_outputs::{write_images, ImageFiles};
use crate::invocation::Invocation;
use anyhow::{anyhow, bail, Context, Result};
use nanobragg_core::config::Misset;
use nanobragg_core::render::{cpu, RenderInfo};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::{Experiment, SimConfig};
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::g;
use nanobragg_io::image_writer::{self, Image};
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

/// The file name of shot `i` (1-based) of an output: `<stem>_NNNNN<.ext>`.
pub fn shot_path(name: &Path, i: usize) -> PathBuf {
    crate::output_files::tagged(name, &format!("{i:05}"))
}

/// One output of a batch: a file per shot (`<stem>_NNNNN<ext>`), or a device
/// or pipe that every shot is written into in turn.
enum ShotOutput {
    /// The name the shots' names are made from.
    Files(PathBuf),
    /// The device or pipe, opened once for all shots.
    InPlace(Pending),
}

/// The outputs of a batch, in the order each shot writes them: the float
/// image, then those of `-intfile`, `-pgmfile`, `-noisefile`, `-nxmxfile`
/// and `-cbffile` where given.
struct BatchOutputs {
    list: Vec<(&'static str, ShotOutput)>,
}

impl BatchOutputs {
    /// The outputs the command line asks for; the devices and pipes among
    /// them opened (unwritable ones refused).
    fn new(inv: &Invocation) -> Result<BatchOutputs> {
        let o = &inv.outputs;
        let none = PathBuf::new();
        let wanted = [
            ("-floatfile", &o.floatfile, true),
            ("-intfile", &o.intfile, o.intfile_given),
            ("-pgmfile", &o.pgmfile, o.pgmfile_given && o.write_pgm),
            ("-noisefile", &o.noisefile, o.noisefile_given && o.calculate_noise),
            ("-nxmxfile", o.nxmxfile.as_ref().unwrap_or(&none), o.nxmxfile.is_some()),
            ("-cbffile", o.cbffile.as_ref().unwrap_or(&none), o.cbffile.is_some()),
        ];
        let mut list = Vec::new();
        for (flag, path, given) in wanted {
            if !given {
                continue;
            }
            let out = if nanobragg_io::atomic::writes_in_place(path) {
                ShotOutput::InPlace(crate::output_files::open_output(flag, path)?)
            } else {
                ShotOutput::Files(path.clone())
            };
            list.push((flag, out));
        }
        Ok(BatchOutputs { list })
    }

    /// Shot `i`'s (1-based) file of each output (`None`: a device or pipe).
    fn shot_files(&self, i: usize) -> Vec<(&'static str, Option<PathBuf>)> {
        let file = |o: &ShotOutput| match o {
            ShotOutput::Files(stem) => Some(shot_path(stem, i)),
            ShotOutput::InPlace(_) => None,
        };
        self.list.iter().map(|(flag, o)| (*flag, file(o))).collect()
    }

    /// Refuses, before any shot is rendered, a batch that cannot be written
    /// whole (see [`crate::output_files::check_shots`]; `sizes`: the bytes
    /// of one shot's file of each output).
    fn check(&self, what: &str, shots: usize, sizes: &[u64]) -> Result<()> {
        let files = (1..=shots).map(|i| {
            let files = self.shot_files(i).into_iter().zip(sizes);
            files.filter_map(|((flag, path), &size)| Some((flag, path?, size))).collect()
        });
        crate::output_files::check_shots(what, files.collect())
    }
}

/// Render every shot of a batch and write its images: the float image, and
/// the int, PGM and noise images where their flags are given (scaled as a
/// single run scales them; shot k's noise from the seed `noise_seed` + k − 1).
/// Each shot is planned just before it renders (on the GPU, all before the
/// first), its structure factors shared with `sf_plan`, a plan of the
/// invocation's model: the batch holds one grid however many shots it has.
pub fn run_batch(
    inv: &Invocation,
    batch: &Path,
    seeds: SetupSeeds,
    noise_seed: i64,
    sf_plan: &Plan,
) -> Result<()> {
    let angles = read_batch(batch)?;
    let shots = Shots {
        what: "-batch",
        count: angles.len(),
        config: &|i| {
            let mut cfg = inv.config.clone();
            cfg.crystal.misset = Misset::Angles(angles[i]);
            cfg
        },
        label: &|i| {
            let a = angles[i];
            format!("misset {} {} {} deg", g(a[0]), g(a[1]), g(a[2]))
        },
        orientations_only: true,
    };
    run_shots(inv, &shots, seeds, noise_seed, sf_plan)
}

/// The experiments of an `-expt` list, rendered one shot each as
/// [`run_batch`] renders its shots (experiment k's noise from the seed
/// `noise_seed` + k).
pub fn run_expt_shots(
    inv: &Invocation,
    seeds: SetupSeeds,
    noise_seed: i64,
    sf_plan: &Plan,
) -> Result<()> {
    let configs = &inv.shot_configs;
    let shots = Shots {
        what: "-expt",
        count: configs.len(),
        config: &|i| configs[i].clone(),
        label: &|i| {
            let lambda = configs[i].beam.lambda_a;
            format!("experiment {i}, {} Å", g(lambda))
        },
        orientations_only: false,
    };
    run_shots(inv, &shots, seeds, noise_seed, sf_plan)
}

/// Shots rendered one after the other into numbered files.
struct Shots<'a> {
    /// The flag they come from, for messages.
    what: &'static str,
    /// How many.
    count: usize,
    /// Shot `i`'s (from 0) configuration.
    config: &'a dyn Fn(usize) -> SimConfig,
    /// What shot `i` is, for its line of the report.
    label: &'a dyn Fn(usize) -> String,
    /// The shots differ in the crystal's orientation alone (the GPU streams
    /// them through one upload).
    orientations_only: bool,
}

/// Renders and writes `shots` (see [`run_batch`]).
fn run_shots(
    inv: &Invocation,
    shots: &Shots,
    seeds: SetupSeeds,
    noise_seed: i64,
    sf_plan: &Plan,
) -> Result<()> {
    let what = shots.what;
    let experiment = |i: usize| {
        crate::panels::experiment(inv, &(shots.config)(i), seeds, Some(sf_plan))
            .with_context(|| format!("{what} shot {}", i + 1))
    };
    // the first shot's whole image gives the outputs' sizes
    let mut first = Some(experiment(0)?);
    let mut outputs = BatchOutputs::new(inv)?;
    let sizes: Vec<u64> = {
        let plan = first.as_ref().map(Experiment::whole).expect("a batch plans its first shot");
        outputs.list.iter().map(|(flag, _)| crate::image_outputs::file_bytes(flag, plan)).collect()
    };
    inv.check_device()?;
    outputs.check(what, shots.count, &sizes)?;
    let gpu = inv.uses_gpu();
    let out = std::io::stdout();
    let mut out = out.lock();
    let draws_noise = |flag: &str| {
        flag == "-noisefile"
            || (inv.outputs.calculate_noise && (flag == "-nxmxfile" || flag == "-cbffile"))
    };
    if outputs.list.iter().any(|(flag, _)| draws_noise(flag)) {
        writeln!(out, "noise seed: {noise_seed} for shot 1, one more for each shot after it")?;
    }
    let start = Instant::now();
    let mut write_shot = |i: usize, image: &[f32], exp: &Experiment, info: RenderInfo| {
        crate::render::check_finite_image(image, inv, exp.whole())
            .map_err(|e| anyhow!("{what} shot {}: {e}", i + 1))?;
        let names = outputs.shot_files(i + 1);
        let mut owned: Vec<Option<Pending>> = Vec::with_capacity(names.len());
        for (flag, path) in &names {
            owned.push(match path {
                Some(p) => Some(crate::output_files::open_output(flag, p)?),
                None => None,
            });
        }
        // each output's file: this shot's own, or the shared device
        let mut targets: Vec<(&'static str, &mut Pending)> = owned
            .iter_mut()
            .zip(outputs.list.iter_mut())
            .map(|(own, (flag, shared))| match (own, shared) {
                (Some(p), _) => (*flag, p),
                (None, ShotOutput::InPlace(p)) => (*flag, p),
                (None, ShotOutput::Files(_)) => unreachable!("a file per shot is opened above"),
            })
            .collect();
        let mut take = |flag: &str| {
            let at = targets.iter().position(|(f, _)| *f == flag)?;
            Some(targets.swap_remove(at).1)
        };
        let float = take("-floatfile").expect("every batch writes float images");
        image_writer::write(float, Image::Float(image))
            .map_err(|e| crate::output_files::write_error("-floatfile", e))?;
        let files = ImageFiles {
            int: take("-intfile"),
            pgm: take("-pgmfile"),
            noise: take("-noisefile"),
            nxmx: take("-nxmxfile"),
            cbf: take("-cbffile"),
            frame: None,
        };
        if files.int.is_some()
            || files.pgm.is_some()
            || files.noise.is_some()
            || files.nxmx.is_some()
            || files.cbf.is_some()
        {
            let noise_idum = -noise_seed.wrapping_add(i as i64);
            let mut sink = std::io::sink();
            write_images(&mut sink, exp, inv, image, &info, files, noise_idum)?;
        }
        let files: Vec<(&'static str, Pending)> =
            names.iter().zip(owned).filter_map(|((flag, _), p)| Some((*flag, p?))).collect();
        crate::output_files::commit(files)?;
        let max = image.iter().fold(0.0f32, |m, &v| m.max(v));
        let list: Vec<String> = names
            .iter()
            .zip(&outputs.list)
            .map(|((_, path), (flag, o))| match (path, o) {
                (Some(p), _) => p.display().to_string(),
                (None, ShotOutput::InPlace(p)) => p.target().display().to_string(),
                (None, ShotOutput::Files(_)) => flag.to_string(),
            })
            .collect();
        writeln!(
            out,
            "shot {}: {}, max_I = {}, wrote {}",
            i + 1,
            (shots.label)(i),
            g(max as f64),
            list.join(", ")
        )?;
        Ok(())
    };
    if gpu && shots.orientations_only && first.as_ref().is_some_and(|e| e.plans.len() == 1) {
        // the GPU renderer streams the shots of one detector plane: each
        // shot is planned for its orientation, and again when its image
        // comes back (a plan at a time is held beside the first; the
        // structure factors are shared)
        let first = first.take().expect("checked above");
        let mut orientations = vec![nanobragg_cuda::Shot::from_plan(&first.plans[0])];
        for i in 1..shots.count {
            orientations.push(nanobragg_cuda::Shot::from_plan(&experiment(i)?.plans[0]));
        }
        let mut renderer = nanobragg_cuda::GpuRenderer::new(&first.plans[0], inv.precision)
            .map_err(|e| anyhow!("-device cuda: {e}"))?;
        let mut failure = None;
        // the same for every shot (the orientation does not change it)
        let background = cpu::background_image(&first.plans[0], inv.precision);
        renderer
            .render_batch_with(&orientations, |i, img| {
                if failure.is_some() {
                    return;
                }
                let again;
                let exp = match i {
                    0 => &first,
                    _ => match experiment(i) {
                        Ok(e) => {
                            again = e;
                            &again
                        }
                        Err(e) => {
                            failure = Some(e);
                            return;
                        }
                    },
                };
                let plan = &exp.plans[0];
                // the pixel of C's first phi sweep, where there is one
                let mut fixed = None;
                if plan.first_sweep_cells.is_some() || background.is_some() {
                    let mut copy = img.to_vec();
                    for (v, b) in copy.iter_mut().zip(background.iter().flatten()) {
                        *v = (*v as f64 + b) as f32;
                    }
                    // (which puts the background back on its pixel)
                    cpu::put_first_sweep(plan, inv.precision, &mut copy, None);
                    fixed = Some(copy);
                }
                let info = RenderInfo::default();
                failure = write_shot(i, fixed.as_deref().unwrap_or(img), exp, info).err();
            })
            .map_err(|e| anyhow!("-device cuda: {e}"))?;
        if let Some(e) = failure {
            return Err(e);
        }
    } else {
        // each shot planned just before it renders; its panels side by side
        // on the CPU (the precision -exact included, which the GPU kernel
        // lacks), one after the other on the GPU
        for i in 0..shots.count {
            let exp = match first.take() {
                Some(exp) => exp,
                None => experiment(i)?,
            };
            let (image, infos) = crate::panels::render(inv, &exp)?;
            write_shot(i, &image, &exp, crate::panels::whole_info(&exp, infos))?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    writeln!(
        out,
        "rendered {} shots in {} s ({} images/s) on the {}",
        shots.count,
        g(secs),
        g(shots.count as f64 / secs),
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
