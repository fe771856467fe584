//! A rotation series (`-images N`, or an `-expt` scan of N images): image k
//! (0-based) turns the crystal from `-phi` + k·`-osc` by `-osc`, with the
//! command's mosaic domains and the noise seed `-seed` + k (as `-batch`
//! shots are seeded). Image k depends on nothing but k: it is the image of
//! the same command with that `-phi` and `-seed` and no `-images`.
//!
//! `-nxmxfile` holds every frame in one NXmx file, the goniometer's phi
//! given per frame (`phi`, `phi_end`, `phi_increment_set`); the other
//! outputs are one file per image, `NAME_NNNNN.ext` numbered from the
//! scan's first image. With `-shard i/K` (or a job array, or MPI ranks)
//! worker w of W renders the contiguous block of images
//! [w·N/W, (w+1)·N/W), its NXmx file named by the block
//! (`NAME_00001-00050.nxs`); `-resume` renders only the images whose files
//! (or whose block's NXmx file) are not yet written, and only where they
//! were written by the same command: the NXmx file's stamp, and for the
//! numbered files `NAME_series.txt` beside the first output's, say so.

use crate::dataset::team::{shard_from, Team};
use crate::image_outputs::{write_images, ImageFiles};
use crate::invocation::Invocation;
use crate::output_files::tagged;
use anyhow::{bail, Context, Result};
use nanobragg_core::config::Misset;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::Experiment;
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::g;
use nanobragg_io::image_writer::{self, Image};
use nanobragg_io::shot_record::ShotRecord;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Flags a rotation series does not take: they render or write something
/// other than the series' images.
const NOT_IN_A_SERIES: [(&str, &str); 4] = [
    ("-batch", "a batch's shots differ in orientation, a series' in phi"),
    ("-gradient", "derivative images are written for one image"),
    ("-printout", "pixel traces are printed for one image"),
    ("-printout_pixel", "pixel traces are printed for one image"),
];

/// Flags that say how a series is run, not what it renders: left out of
/// the command line its files are stamped with (`-resume` compares it).
const HOW_IT_RUNS: [(&str, usize); 6] = [
    ("-shard", 1),
    ("-resume", 0),
    ("-threads", 1),
    ("-device", 1),
    ("-progress", 0),
    ("-noprogress", 0),
];

/// Refuses what a series cannot do, before anything is rendered: see
/// [`NOT_IN_A_SERIES`]; `-shard` and `-resume` without a series.
pub fn check(inv: &Invocation) -> Result<()> {
    if inv.series.images <= 1 {
        for (given, flag) in [(inv.shard.is_some(), "-shard"), (inv.resume, "-resume")] {
            if given {
                bail!("{flag}: only a rotation series (-images N, or an -expt scan of N images) is split or resumed");
            }
        }
        return Ok(());
    }
    let given = |flag: &str| match flag {
        "-batch" => inv.batch_path.is_some(),
        "-gradient" => inv.gradient.is_some(),
        "-printout" => inv.printout && inv.printout_pixel.is_none(),
        "-printout_pixel" => inv.printout_pixel.is_some(),
        _ => inv.args.iter().any(|a| a == flag),
    };
    if let Some((flag, why)) = NOT_IN_A_SERIES.iter().find(|(f, _)| given(f)) {
        bail!("{flag}: not in a rotation series of {} images: {why}", inv.series.images);
    }
    Ok(())
}

/// The command line a series' files are stamped with: the given one
/// without the flags of [`HOW_IT_RUNS`].
fn stamp(args: &[String]) -> String {
    let mut kept = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let skip = HOW_IT_RUNS.iter().find(|(f, _)| *f == args[i]).map(|&(_, n)| n);
        match skip {
            Some(n) => i += 1 + n,
            None => {
                kept.push(args[i].as_str());
                i += 1;
            }
        }
    }
    kept.join(" ")
}

/// The file beside the numbered output `name` that names the command its
/// files were written by (`f.bin`: `f_series.txt`).
fn manifest_path(name: &Path) -> PathBuf {
    let stem = name.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    name.with_file_name(format!("{stem}_series.txt"))
}

/// The image files of one image of the series: each numbered output's
/// flag and name.
fn image_files(
    numbered: &[(&'static str, PathBuf)],
    number: usize,
) -> Vec<(&'static str, PathBuf)> {
    numbered.iter().map(|(flag, name)| (*flag, crate::batch::shot_path(name, number))).collect()
}

/// Renders this worker's images of the series of `inv` and writes them
/// (see the module's description); `sf_plan`: a plan of the command's model
/// whose structure factors every image shares.
pub fn run_series(
    inv: &Invocation,
    seeds: SetupSeeds,
    noise_seed: i64,
    sf_plan: &Plan,
) -> Result<()> {
    let team = Team::join(shard_from(inv.shard.as_deref())?)?;
    run_block(inv, seeds, noise_seed, sf_plan, team.worker()).map_err(|e| team.fail(e))
}

/// [`run_series`] for worker `w` of `workers`.
fn run_block(
    inv: &Invocation,
    seeds: SetupSeeds,
    noise_seed: i64,
    sf_plan: &Plan,
    (w, workers): (u64, u64),
) -> Result<()> {
    let (n, first) = (inv.series.images, inv.series.first_image);
    let (phi0, osc) = (inv.config.crystal.phi0_deg, inv.config.crystal.osc_deg);
    let (w, workers) = (w as usize, workers as usize);
    let block = (n * w / workers)..(n * (w + 1) / workers);
    // (the clock seeds differ between the runs that share or resume a
    // series: their images would not be those of one command)
    if workers > 1 || inv.resume {
        let how = if inv.resume { "resumed" } else { "split among workers" };
        if inv.outputs.calculate_noise && inv.seed.is_none() {
            bail!("a rotation series {how} needs the noise -seed (or -nonoise), so that every run draws image k's noise from the same seed");
        }
        let crystal = &inv.config.crystal;
        if crystal.misset == Misset::Random && crystal.misset_seed.is_none() {
            bail!("a rotation series {how} needs -misset_seed with -misset random, so that every run turns the crystal the same way");
        }
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    if block.is_empty() {
        writeln!(out, "worker {w} of {workers}: no image of the {n} to render")?;
        return Ok(());
    }
    let o = &inv.outputs;
    let others_given = o.intfile_given
        || (o.pgmfile_given && o.write_pgm)
        || (o.noisefile_given && o.calculate_noise)
        || o.nxmxfile.is_some()
        || o.cbffile.is_some();
    let wanted = [
        ("-floatfile", Some(&o.floatfile), o.floatfile_given || !others_given),
        ("-intfile", Some(&o.intfile), o.intfile_given),
        ("-pgmfile", Some(&o.pgmfile), o.pgmfile_given && o.write_pgm),
        ("-noisefile", Some(&o.noisefile), o.noisefile_given && o.calculate_noise),
        ("-cbffile", o.cbffile.as_ref(), o.cbffile.is_some()),
    ];
    let numbered: Vec<(&'static str, PathBuf)> = wanted
        .into_iter()
        .filter(|(_, _, given)| *given)
        .filter_map(|(flag, path, _)| Some((flag, path?.clone())))
        .collect();
    for (flag, path) in &numbered {
        if nanobragg_io::atomic::writes_in_place(path) {
            bail!(
                "{flag} {}: a rotation series writes one file per image, not into a device or pipe",
                path.display()
            );
        }
    }
    let nxmx_path = o.nxmxfile.as_ref().map(|p| match workers {
        1 => p.clone(),
        _ => tagged(p, &format!("{:05}-{:05}", first + block.start, first + block.end - 1)),
    });
    let stamp = stamp(&inv.args);
    let digest = crate::dataset::spec::digest(&stamp);
    let numbers: Vec<u64> = block.clone().map(|k| (first + k) as u64).collect();
    let nxmx_done = inv.resume
        && nxmx_path.as_ref().is_some_and(|p| {
            matches!(nanobragg_io::nxmx_series::read_shots(p), Ok((s, d)) if s == numbers && d == digest)
        });
    if let Some(p) = nxmx_path.as_ref().filter(|_| nxmx_done) {
        writeln!(
            out,
            "{} holds images {} to {}: kept",
            p.display(),
            numbers[0],
            numbers[numbers.len() - 1]
        )?;
    }
    let write_nxmx = nxmx_path.is_some() && !nxmx_done;
    // the numbered files' command, beside them: -resume keeps only the
    // files of the same command
    let manifest = numbered.first().map(|(_, p)| manifest_path(p));
    let manifest_text = format!(
        "nanobragg rotation series\ndigest: {digest}\nimages: {} to {}\ncommand: {stamp}\n",
        first,
        first + n - 1
    );
    if let (Some(path), true) = (&manifest, inv.resume) {
        let shown = path.display();
        match std::fs::read_to_string(path) {
            Ok(text) if text == manifest_text => {}
            Ok(_) => bail!("-resume: {shown} says the numbered files are another command's: run without -resume (or with that command)"),
            Err(e) => bail!("-resume: {shown}: {e}: the numbered files cannot be told to be this command's (run without -resume)"),
        }
    }
    let todo: Vec<usize> = block
        .clone()
        .filter(|&k| {
            write_nxmx
                || !inv.resume
                || image_files(&numbered, first + k).iter().any(|(_, p)| !p.is_file())
        })
        .collect();
    if todo.is_empty() {
        writeln!(
            out,
            "images {} to {}: every file is written",
            numbers[0],
            numbers[numbers.len() - 1]
        )?;
        return Ok(());
    }

    let image_config = |k: usize| {
        let mut cfg = inv.config.clone();
        cfg.crystal.phi0_deg = phi0 + k as f64 * osc;
        cfg
    };
    let experiment = |k: usize| {
        crate::panels::experiment(inv, &image_config(k), seeds, Some(sf_plan))
            .with_context(|| format!("image {}", first + k))
    };
    let mut next = Some(experiment(todo[0])?);
    let sizes = {
        let plan = next.as_ref().map(Experiment::whole).expect("planned above");
        let size = |flag: &str| crate::image_outputs::file_bytes(flag, plan);
        let mut shots: Vec<Vec<(&str, PathBuf, u64)>> = todo
            .iter()
            .map(|&k| {
                let files = image_files(&numbered, first + k).into_iter();
                files.map(|(flag, p)| (flag, p, size(flag))).collect()
            })
            .collect();
        if let (Some(p), true) = (&nxmx_path, write_nxmx) {
            let d = &plan.detector;
            let frames = (block.len() * d.fpixels * d.spixels) as u64 * 4 + 65536;
            shots[0].push(("-nxmxfile", p.clone(), frames));
        }
        shots
    };
    inv.check_device()?;
    crate::output_files::check_shots("-images", sizes)?;
    if let (Some(path), false) = (&manifest, inv.resume) {
        let mut file = crate::output_files::open_output("-images", path)?;
        file.write(|w| w.write_all(manifest_text.as_bytes()))
            .map_err(|e| crate::output_files::write_error("-images", e))?;
        crate::output_files::commit(vec![("-images", file)])?;
    }

    let mut series = match (&nxmx_path, write_nxmx) {
        (Some(path), true) => {
            let exp = next.as_ref().expect("planned above");
            let panels: Vec<_> = exp.plans.iter().map(|p| (p, &[][..])).collect();
            // (one crystal, turned by phi alone)
            let mut header = crate::image_headers::mx_image(exp.whole(), &panels, o, true);
            // (the frames follow each other)
            let start = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |t| t.as_secs());
            let span = exp.whole().exposure_s.max(0.0) * block.len() as f64;
            header.end_time = nanobragg_io::mx::utc_iso8601(start + span.round() as u64);
            // the first image of the block is planned first: the header's phi
            // is its start
            let starts: Vec<f64> = block.clone().map(|k| phi0 + k as f64 * osc).collect();
            let file = image_writer::series(
                path,
                &header,
                block.len(),
                false,
                (&stamp, &digest),
                o.nxmx_compression,
                Some(&starts),
            )
            .map_err(|e| crate::output_files::write_error("-nxmxfile", e))?;
            Some(file)
        }
        _ => None,
    };
    if o.calculate_noise && (write_nxmx || numbered.iter().any(|(f, _)| *f == "-noisefile")) {
        writeln!(
            out,
            "noise seed: {} for image {}, one more for each image after it",
            noise_seed.wrapping_add(todo[0] as i64),
            first + todo[0]
        )?;
    }
    let start = Instant::now();
    for &k in &todo {
        let exp = match next.take() {
            Some(e) => e,
            None => experiment(k)?,
        };
        let number = first + k;
        let (image, infos) = crate::panels::render(inv, &exp)?;
        crate::render::check_finite_image(&image, inv, exp.whole())
            .with_context(|| format!("image {number}"))?;
        let names = image_files(&numbered, number);
        let mut files: Vec<(&'static str, Pending)> = Vec::with_capacity(names.len());
        for (flag, path) in &names {
            files.push((flag, crate::output_files::open_output(flag, path)?));
        }
        let mut frame = Vec::new();
        {
            // each output's file, taken by its flag
            let mut targets: Vec<(&str, &mut Pending)> =
                files.iter_mut().map(|(flag, p)| (*flag, p)).collect();
            let mut take = |flag: &str| {
                let at = targets.iter().position(|(f, _)| *f == flag)?;
                Some(targets.swap_remove(at).1)
            };
            if let Some(float) = take("-floatfile") {
                image_writer::write(float, Image::Float(&image))
                    .map_err(|e| crate::output_files::write_error("-floatfile", e))?;
            }
            let targets = ImageFiles {
                int: take("-intfile"),
                pgm: take("-pgmfile"),
                noise: take("-noisefile"),
                nxmx: None,
                cbf: take("-cbffile"),
                frame: series.is_some().then_some(&mut frame),
            };
            let info = crate::panels::whole_info(&exp, infos);
            let idum = -noise_seed.wrapping_add(k as i64);
            write_images(&mut std::io::sink(), &exp, inv, &image, &info, targets, idum)?;
        }
        crate::output_files::commit(files)?;
        if let Some(file) = series.as_mut() {
            let parts: Vec<_> = (0..exp.plans.len()).map(|p| exp.layout.piece(p, &frame)).collect();
            let parts: Vec<&[i32]> = parts.iter().map(|v| &v[..]).collect();
            let seed = noise_seed.wrapping_add(k as i64);
            let record = record(inv, &exp, number as u64, seed, &image, &frame);
            file.write_frame(&parts, None, record)
                .map_err(|e| crate::output_files::write_error("-nxmxfile", e))?;
        }
        let max = image.iter().fold(0.0f32, |m, &v| m.max(v));
        let phi = phi0 + k as f64 * osc;
        let wrote: Vec<String> = names.iter().map(|(_, p)| p.display().to_string()).collect();
        let wrote = match wrote.is_empty() {
            true => String::new(),
            false => format!(", wrote {}", wrote.join(", ")),
        };
        writeln!(
            out,
            "image {number}: phi {} to {} deg, max_I = {}{wrote}",
            g(phi),
            g(phi + osc),
            g(max as f64)
        )?;
    }
    if let Some(file) = series {
        let target = file.target().display().to_string();
        file.commit().map_err(|e| crate::output_files::write_error("-nxmxfile", e))?;
        writeln!(
            out,
            "wrote {target}: NXmx, {} frames (images {} to {})",
            block.len(),
            numbers[0],
            numbers[numbers.len() - 1]
        )?;
    }
    let secs = start.elapsed().as_secs_f64();
    writeln!(
        out,
        "rendered {} images in {} s ({} images/s) on the {}",
        todo.len(),
        g(secs),
        g(todo.len() as f64 / secs),
        if inv.uses_gpu() { "GPU" } else { "CPU" }
    )?;
    Ok(())
}

/// What the NXmx file keeps of image `number`: its noise seed and photons
/// (the noise image's, else the rendered ones), with the crystal's values.
fn record(
    inv: &Invocation,
    exp: &Experiment,
    number: u64,
    noise_seed: i64,
    image: &[f32],
    frame: &[i32],
) -> ShotRecord {
    let p0 = &exp.plans[0];
    ShotRecord {
        shot: number,
        spectrum_a: crate::image_headers::plan_spectrum(p0),
        misset_deg: match inv.config.crystal.misset {
            Misset::Angles(a) => a,
            _ => [f64::NAN; 3],
        },
        n_cells: p0.n_cells,
        mosaic_spread_deg: p0.mosaic_spread_rad.to_degrees(),
        mosaic_seed: inv.config.crystal.mosaic_seed,
        fluence: p0.fluence,
        water_um: p0.water_size_m * 1e6,
        noise_seed,
        photons: match inv.outputs.calculate_noise {
            true => frame.iter().map(|&v| f64::from(v)).sum(),
            false => image.iter().map(|&v| f64::from(v)).sum(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_names() {
        let args: Vec<String> =
            "-images 4 -threads 2 -shard 1/2 -resume -phi 3".split(' ').map(String::from).collect();
        assert_eq!(stamp(&args), "-images 4 -phi 3");
        assert_eq!(
            tagged(Path::new("d/s.nxs"), "00001-00050"),
            PathBuf::from("d/s_00001-00050.nxs")
        );
        assert_eq!(tagged(Path::new("img"), "00012"), PathBuf::from("img_00012"));
    }
}
