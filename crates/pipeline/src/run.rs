//! The render driver: the one image of an experiment (every panel of its
//! detector, a detector of flags being one panel), with its outputs,
//! statistics and traces (the dispatcher, [`crate::dispatch`], has refused
//! what cannot be done).
//!
//! Everything that can be refused is refused before anything is written:
//! the plan (inputs, values, memory) is resolved and every output is opened
//! (under a temporary name beside its target, see [`crate::output_files`])
//! first. The outputs are renamed into place together at the end, so a run
//! that fails or is interrupted leaves the old outputs as they were and no
//! temporary behind (the Fdump file, a cache of the structure factors that
//! nanoBragg.c writes before rendering, is the one output written early).

use crate::image_outputs::{write_images, ImageFiles};
use crate::invocation::{Invocation, Outputs};
use crate::output_files::{open_output, write_error};
use crate::progress::{with_progress, PROGRESS_DELAY};
use crate::report;
use anyhow::Result;
use nanobragg_core::setup::SetupSeeds;
use nanobragg_core::Experiment;
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::g;
use nanobragg_io::image_writer::{self, Image};
use nanobragg_io::le;
use std::io::{IsTerminal, Write};

/// The output files of a run, open under temporary names until
/// [`Self::commit`].
struct OutputFiles {
    float: Pending,
    int: Pending,
    pgm: Option<Pending>,
    noise: Option<Pending>,
    nxmx: Option<Pending>,
    cbf: Option<Pending>,
}

impl OutputFiles {
    /// Opens every output this run writes; the error names the flag and the file.
    fn open(o: &Outputs) -> Result<OutputFiles> {
        Ok(OutputFiles {
            float: open_output("-floatfile", &o.floatfile)?,
            int: open_output("-intfile", &o.intfile)?,
            pgm: o.write_pgm.then(|| open_output("-pgmfile", &o.pgmfile)).transpose()?,
            noise: o
                .calculate_noise
                .then(|| open_output("-noisefile", &o.noisefile))
                .transpose()?,
            nxmx: o.nxmxfile.as_deref().map(|p| open_output("-nxmxfile", p)).transpose()?,
            cbf: o.cbffile.as_deref().map(|p| open_output("-cbffile", p)).transpose()?,
        })
    }

    /// Renames every output into place, in the order nanoBragg.c writes them,
    /// then the `-gradient` images `more`.
    fn commit(self, more: Vec<(&'static str, Pending)>) -> Result<()> {
        let files = [
            ("-floatfile", Some(self.float)),
            ("-intfile", Some(self.int)),
            ("-pgmfile", self.pgm),
            ("-noisefile", self.noise),
            ("-nxmxfile", self.nxmx),
            ("-cbffile", self.cbf),
        ];
        let mut files: Vec<_> =
            files.into_iter().filter_map(|(flag, f)| Some((flag, f?))).collect();
        files.extend(more);
        crate::output_files::commit(files)
    }

    /// The int, PGM and noise images' files, for [`write_images`].
    fn images(&mut self) -> ImageFiles<'_> {
        ImageFiles {
            int: Some(&mut self.int),
            pgm: self.pgm.as_mut(),
            noise: self.noise.as_mut(),
            nxmx: self.nxmx.as_mut(),
            cbf: self.cbf.as_mut(),
            frame: None,
        }
    }
}

/// Writes the float image `image` into `file` (where it was not rendered
/// straight into the file's mapping).
fn write_float(file: &mut Pending, image: &[f32]) -> Result<()> {
    image_writer::write(file, Image::Float(image)).map_err(|e| write_error("-floatfile", e))
}

/// Renders and writes the image of `exp` (the invocation's model), as
/// nanoBragg.c does for a detector of its flags: every panel planned and
/// rendered alone, in its place of the one written image (NXmx: one module
/// per panel), with statistics per named panel and overall, and
/// derivative images placed the same way.
pub fn run(inv: &Invocation, exp: &Experiment, seeds: SetupSeeds, noise_idum: i64) -> Result<()> {
    let (plans, layout) = (&exp.plans, &exp.layout);
    if let (Some(path), Some((w, h))) = (&inv.img_path, inv.img_size) {
        let (fp, sp) = (layout.width, layout.height);
        if (w, h) != (fp, sp) {
            eprintln!(
                "warning: -img {}: the image is {w} x {h} pixels but the detector is {fp} x {sp}; only its header values are used",
                path.display()
            );
        }
    }
    inv.check_device()?;
    // refuse unwritable outputs before writing anything, the Fdump file included
    let mut files = OutputFiles::open(&inv.outputs)?;
    let gradient_files = crate::gradient::open(inv, &exp.configs[0], &plans[0])?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report::setup(&mut out, &plans[0], inv, noise_idum)?;
    // the renders write straight into the mapped float file
    let mut float_map =
        files.float.map(exp.pixels() * 4).map_err(|e| write_error("-floatfile", e))?;
    let mapped = float_map.is_some();
    let mut owned = match mapped {
        true => Vec::new(),
        false => vec![0.0f32; exp.pixels()],
    };
    let image: &mut [f32] = match float_map.as_mut() {
        Some(map) => le::values_mut(map),
        None => &mut owned,
    };
    let show_progress = inv.progress.unwrap_or_else(|| std::io::stderr().is_terminal());
    let panels = match plans.len() {
        1 => String::new(),
        n => format!("{n} panels, "),
    };
    let what = format!(
        "rendering {panels}{} x {} pixels, {} samples each",
        layout.width, layout.height, plans[0].steps
    );
    let rendered = with_progress(show_progress, PROGRESS_DELAY, &what, || {
        crate::panels::render_into(inv, exp, image)
    })?;
    let image: &[f32] = image;
    for (k, (name, panel_info)) in exp.names.iter().zip(&rendered).enumerate() {
        let (plan, panel) = (&plans[k], exp.layout.piece(k, image));
        let d = &plan.detector;
        if let Some(name) = name {
            writeln!(
                out,
                "panel {name}: {} x {} pixels, first pixel at {} {} {} mm, {} mm from the sample",
                d.fpixels,
                d.spixels,
                g(d.pix0[0] * 1e3),
                g(d.pix0[1] * 1e3),
                g(d.pix0[2] * 1e3),
                g(d.close_distance_m * 1e3)
            )?;
        }
        crate::render::check_finite_image(&panel, inv, plan)?;
        let fallback = panel_info.interpolation_fallback;
        if !inv.printout {
            crate::traces::traces(&mut out, exp, k, inv, image, fallback)?;
        }
        if let Some(name) = name {
            let (mut sum, mut max) = (0.0f64, 0.0f32);
            for r in &panel_info.rows {
                sum += r.sum;
                max = max.max(r.max);
            }
            if panel_info.rows.is_empty() {
                // (a GPU render gathers no row statistics)
                sum = panel.iter().map(|&x| x as f64).sum();
                max = panel.iter().fold(0.0, |m, &x| m.max(x));
            }
            let mean = sum / panel.len() as f64;
            writeln!(out, "panel {name}: max_I = {}  mean= {}", g(max as f64), g(mean))?;
        }
        if inv.printout {
            crate::traces::traces(&mut out, exp, k, inv, image, fallback)?;
        }
    }
    crate::traces::check_printout_pixel(exp, inv);
    let info = crate::panels::whole_info(exp, rendered);
    writeln!(out)?;
    report::solid_angle_line(&mut out, info.omega_sum, plans[0].steps)?;
    if !mapped {
        write_float(&mut files.float, image)?;
    }
    // the written images are one image of every panel; the statistics
    // leave out the pixels between panels
    write_images(&mut out, exp, inv, image, &info, files.images(), noise_idum)?;
    drop(float_map);
    let gradients = crate::gradient::write(inv, exp, seeds, &mut out, gradient_files)?;
    // all together, so that an error or a signal before here changes no output
    files.commit(gradients)?;
    out.flush()?;
    Ok(())
}
