//! The render driver: one image, of a one-panel detector or of every panel
//! of a multi-panel one, with its outputs, statistics and traces (the
//! dispatcher, [`crate::dispatch`], has refused what cannot be done).
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
use crate::panels::PanelRun;
use crate::progress::{with_progress, PROGRESS_DELAY};
use crate::report;
use anyhow::Result;
use nanobragg_core::config::SimConfig;
use nanobragg_core::render::{cpu, RenderInfo, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};
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
        }
    }
}

/// Writes the float image `image` into `file` (where it was not rendered
/// straight into the file's mapping).
fn write_float(file: &mut Pending, image: &[f32]) -> Result<()> {
    image_writer::write(file, Image::Float(image)).map_err(|e| write_error("-floatfile", e))
}

/// Renders the float image on the chosen device, with a progress spinner when
/// `show` (see [`with_progress`]). On the CPU it renders into `target` when
/// one is given (zeros, the size of the image: the mapped output file) and
/// returns no image of its own; otherwise it returns the new image.
fn render_with_progress(
    plan: &Plan,
    inv: &Invocation,
    show: bool,
    gpu: bool,
    target: Option<&mut [f32]>,
) -> Result<(Option<Vec<f32>>, RenderInfo)> {
    let opts = RenderOptions { threads: inv.threads };
    let d = &plan.detector;
    let what =
        format!("rendering {} x {} pixels, {} samples each", d.fpixels, d.spixels, plan.steps);
    let precision = inv.precision;
    with_progress(show, PROGRESS_DELAY, &what, || {
        if gpu {
            // (the pipeline's one GPU render: Python's and the panels' too)
            let mut image = vec![0.0f32; d.fpixels * d.spixels];
            let info = crate::render::render_plan_into(inv, plan, &mut image)?;
            return Ok((Some(image), info));
        }
        Ok(match target {
            Some(image) => (None, cpu::render_into(plan, opts, precision, image)),
            None => {
                let mut image = vec![0.0f32; d.fpixels * d.spixels];
                let info = cpu::render_into(plan, opts, precision, &mut image);
                (Some(image), info)
            }
        })
    })
}

/// Renders and writes the image of a one-panel detector (`plan`, of the
/// invocation's model), as nanoBragg.c does.
pub fn single_panel(
    inv: &Invocation,
    plan: &Plan,
    seeds: SetupSeeds,
    noise_idum: i64,
) -> Result<()> {
    if let (Some(path), Some((w, h))) = (&inv.img_path, inv.img_size) {
        let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
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
    let gradient_files = crate::gradient::open(inv, &inv.config, plan)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report::setup(&mut out, plan, inv, noise_idum)?;

    let gpu = inv.uses_gpu();
    let d = &plan.detector;
    // the CPU renders straight into the mapped float file
    let mut float_map = match gpu {
        true => None,
        false => {
            files.float.map(d.fpixels * d.spixels * 4).map_err(|e| write_error("-floatfile", e))?
        }
    };
    let show_progress = inv.progress.unwrap_or_else(|| std::io::stderr().is_terminal());
    let mut mapped: Option<&mut [f32]> = float_map.as_mut().map(|m| le::values_mut(m));
    let (owned, rendered) =
        render_with_progress(plan, inv, show_progress, gpu, mapped.as_deref_mut())?;
    let image: &[f32] = match (&owned, mapped) {
        (Some(image), _) => image,
        (None, Some(map)) => map,
        (None, None) => unreachable!("a render without a target returns its image"),
    };
    crate::render::check_finite_image(image, inv, plan)?;
    crate::traces::traces(&mut out, plan, inv, image, &rendered)?;
    writeln!(out)?;
    report::solid_angle_line(&mut out, rendered.omega_sum, plan.steps)?;
    if owned.is_some() {
        write_float(&mut files.float, image)?;
    }
    write_images(&mut out, plan, None, inv, image, &rendered, files.images(), noise_idum)?;
    drop(float_map);
    let gradients =
        crate::gradient::write(inv, &[(&inv.config, plan)], None, seeds, &mut out, gradient_files)?;
    // all together, so that an error or a signal before here changes no output
    files.commit(gradients)?;
    out.flush()?;
    Ok(())
}

/// Renders and writes the image of a multi-panel detector (`-expt`,
/// `-geom`): every panel planned and rendered alone (the single
/// custom-vector panel of its own vectors, see
/// `nanobragg_core::geometry::panel_configs`), the images stacked along
/// slow in the file's panel order (panels of equal width), then written as
/// one image (NXmx: one module per panel); statistics per panel and
/// overall; derivative images stacked the same way.
pub fn multi_panel(
    inv: &Invocation,
    run: &PanelRun,
    seeds: SetupSeeds,
    noise_idum: i64,
) -> Result<()> {
    inv.check_device()?;
    let (o, plans, layout) = (&inv.outputs, &run.plans, &run.layout);
    let mut files = OutputFiles::open(o)?;
    let gradient_files = crate::gradient::open(inv, &run.configs[0], &plans[0])?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report::setup(&mut out, &plans[0], inv, noise_idum)?;
    // the CPU renders straight into the mapped float file
    let mut float_map =
        files.float.map(run.pixels() * 4).map_err(|e| write_error("-floatfile", e))?;
    let mapped = float_map.is_some();
    let mut owned = match mapped {
        true => Vec::new(),
        false => vec![0.0f32; run.pixels()],
    };
    let image: &mut [f32] = match float_map.as_mut() {
        Some(map) => le::values_mut(map),
        None => &mut owned,
    };
    let show_progress = inv.progress.unwrap_or_else(|| std::io::stderr().is_terminal());
    let what = format!(
        "rendering {} panels, {} x {} pixels in all, {} samples each",
        plans.len(),
        layout.width,
        layout.height,
        plans[0].steps
    );
    let rendered =
        with_progress(show_progress, PROGRESS_DELAY, &what, || run.render_into(inv, image))?;
    let image: &[f32] = image;
    let mut info = RenderInfo { omega_sum: 0.0, interpolation_fallback: None, rows: Vec::new() };
    let panels = &inv.config.detector.panels;
    for (k, (p, panel_info)) in panels.iter().zip(rendered).enumerate() {
        let (plan, panel) = (&plans[k], run.panel(k, image));
        let d = &plan.detector;
        writeln!(
            out,
            "panel {}: {} x {} pixels, first pixel at {} {} {} mm, {} mm from the sample",
            p.name,
            d.fpixels,
            d.spixels,
            g(d.pix0[0] * 1e3),
            g(d.pix0[1] * 1e3),
            g(d.pix0[2] * 1e3),
            g(d.close_distance_m * 1e3)
        )?;
        crate::render::check_finite_image(&panel, inv, plan)?;
        if let Some((hkl, hkl0)) = panel_info.interpolation_fallback {
            write!(out, "{}", report::interpolation_warning(hkl, hkl0))?;
        }
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
        writeln!(
            out,
            "panel {}: max_I = {}  mean= {}",
            p.name,
            g(max as f64),
            g(sum / panel.len() as f64)
        )?;
        if inv.printout {
            crate::traces::panel_traces(
                &mut out,
                run,
                k,
                inv,
                image,
                panel_info.interpolation_fallback,
            )?;
        }
        info.omega_sum += panel_info.omega_sum;
        info.interpolation_fallback =
            info.interpolation_fallback.or(panel_info.interpolation_fallback);
        info.rows.extend(panel_info.rows);
    }
    if let Some((f, s)) = inv.printout_pixel.filter(|p| p.0 >= 0 && inv.printout) {
        if (0..plans.len()).all(|k| run.on_panel(k, f, s).is_none()) {
            eprintln!(
                "warning: -printout_pixel {f} {s}: that pixel is on no panel of the {} x {} pixel image",
                layout.width, layout.height
            );
        }
    }
    if !layout.is_stacked() {
        // (the rows' statistics are those of the panels' rows)
        info.rows.clear();
    }
    writeln!(out)?;
    report::solid_angle_line(&mut out, info.omega_sum, plans[0].steps)?;
    if !mapped {
        write_float(&mut files.float, image)?;
    }
    // the written images are one image of every panel; the statistics
    // leave out the pixels between panels
    let detectors = run.detectors();
    write_images(
        &mut out,
        &run.whole,
        Some((&detectors, layout)),
        inv,
        image,
        &info,
        files.images(),
        noise_idum,
    )?;
    drop(float_map);
    let each: Vec<(&SimConfig, &Plan)> = run.configs.iter().zip(plans).collect();
    let gradients =
        crate::gradient::write(inv, &each, Some(layout), seeds, &mut out, gradient_files)?;
    files.commit(gradients)?;
    out.flush()?;
    Ok(())
}
