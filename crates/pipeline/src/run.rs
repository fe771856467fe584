//! One nanoBragg run: plan, report, render, outputs, statistics, traces.
//!
//! Everything that can be refused is refused before anything is written: the
//! plan (inputs, values, memory) is resolved and every output is opened
//! (under a temporary name beside its target, see
//! [`nanobragg_io::atomic`]) first. The outputs are renamed into place
//! together at the end, so a run that fails or is interrupted leaves the old
//! outputs as they were and no temporary behind (the Fdump file, a cache of
//! the structure factors that nanoBragg.c writes before rendering, is the
//! one output written early).

use crate::invocation::{Invocation, Outputs};
use crate::panels::PanelRun;
use crate::render::{clock_seed, explain};
use crate::report;
use anyhow::{anyhow, bail, Result};
use nanobragg_core::config::{SfSource, SimConfig};
use nanobragg_core::geometry::{Detector, PanelLayout};
use nanobragg_core::render::trace::{interpolation_cutoff, trace_pixel, trace_range};
use nanobragg_core::render::{cpu, RenderInfo, RenderOptions};
use nanobragg_core::response::{noisy_image_tiled, Bits, Response, SharedSeeds};
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::sf::fdump::write_fdump_to;
use nanobragg_core::stats::ImageStats;
use nanobragg_core::stats::{
    image_stats, rmsd, rmsd_from_deviations, roi_rows, row_deviation, stats_but_rmsd,
};
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::g;
use nanobragg_io::mx::{utc_iso8601, MxImage, Panel};
use nanobragg_io::smv::SmvHeaderFields;
use nanobragg_io::{le, pgm, smv, IoError};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
            nxmx: o.nxmxfile.as_deref().map(open_nxmx).transpose()?,
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
        nanobragg_io::atomic::commit_all(files).map_err(|(flag, e)| write_error(flag, e))
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

/// The files [`write_images`] writes (`None`: that image is not written).
pub(crate) struct ImageFiles<'a> {
    /// `-intfile`.
    pub int: Option<&'a mut Pending>,
    /// `-pgmfile`.
    pub pgm: Option<&'a mut Pending>,
    /// `-noisefile`.
    pub noise: Option<&'a mut Pending>,
    /// `-nxmxfile`.
    pub nxmx: Option<&'a mut Pending>,
    /// `-cbffile`.
    pub cbf: Option<&'a mut Pending>,
}

/// Starts writing the `-nxmxfile` output `path`.
fn open_nxmx(path: &Path) -> Result<Pending> {
    open_output("-nxmxfile", path)
}

/// Starts writing the output `path` of `flag` (its temporary, beside it).
pub(crate) fn open_output(flag: &str, path: &Path) -> Result<Pending> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("{flag}: the file name is empty");
    }
    if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        bail!("{flag}: cannot write '{shown}': it is a directory");
    }
    Pending::create(path).map_err(|e| {
        let IoError::Write { source, .. } = e else { return anyhow!("{flag}: {e}") };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        match std::fs::metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow!(
                "{flag}: cannot write '{shown}': directory '{}' does not exist",
                dir.display()
            ),
            Ok(m) if !m.is_dir() => {
                anyhow!("{flag}: cannot write '{shown}': '{}' is not a directory", dir.display())
            }
            _ => anyhow!("{flag}: cannot write '{shown}': {source}"),
        }
    })
}

/// A writer's error, naming the flag and the file.
pub(crate) fn write_error(flag: &str, e: IoError) -> anyhow::Error {
    match e {
        IoError::Write { path, source } => {
            anyhow!("{flag}: cannot write '{}': {source}", path.display())
        }
        other => anyhow!("{flag}: {other}"),
    }
}

/// How long a render runs before the progress spinner appears.
const PROGRESS_DELAY: Duration = Duration::from_secs(1);

/// Runs `work` on a worker thread. When `show` and it takes longer than
/// `delay`, shows `what` with a spinner and the elapsed time on stderr until
/// it ends (when stderr is not a terminal: a line before and one after).
fn with_progress<T: Send>(
    show: bool,
    delay: Duration,
    what: &str,
    work: impl FnOnce() -> T + Send,
) -> T {
    if !show {
        return work();
    }
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = scope.spawn(move || {
            let out = work();
            let _ = tx.send(());
            out
        });
        let start = Instant::now();
        if rx.recv_timeout(delay).is_err() {
            if std::io::stderr().is_terminal() {
                let bar = indicatif::ProgressBar::new_spinner().with_elapsed(start.elapsed());
                if let Ok(style) =
                    indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]")
                {
                    bar.set_style(style);
                }
                bar.set_message(what.to_string());
                bar.enable_steady_tick(Duration::from_millis(120));
                let _ = rx.recv();
                bar.finish_and_clear();
            } else {
                eprintln!("{what}");
                let _ = rx.recv();
                eprintln!("done in {:.1} s", start.elapsed().as_secs_f64());
            }
        }
        match worker.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Whether this run renders on a GPU: `-device cuda`, or `-device auto` with
/// a usable one.
fn uses_gpu(inv: &Invocation) -> bool {
    inv.uses_gpu()
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

/// Prints the `-printout` trace of the requested pixels (every rendered pixel
/// when no `-printout_pixel` or a negative fast index is given), and the
/// interpolation warning where nanoBragg.c prints it among them (without
/// `-printout`: the warning alone).
fn traces(
    out: &mut impl Write,
    plan: &Plan,
    inv: &Invocation,
    image: &[f32],
    rendered: &RenderInfo,
) -> Result<()> {
    if !inv.printout {
        if let Some((hkl, hkl0)) = rendered.interpolation_fallback {
            write!(out, "{}", report::interpolation_warning(hkl, hkl0))?;
        }
        return Ok(());
    }
    let d = &plan.detector;
    let (fp, sp) = (d.fpixels, d.spixels);
    // the first pixel whose evaluation left the grid: pixels after it start
    // without interpolation, and the warning is printed during it
    let cutoff = rendered.interpolation_fallback.and_then(|_| interpolation_cutoff(plan));
    let warning =
        rendered.interpolation_fallback.map(|(h, h0)| report::interpolation_warning(h, h0));
    let mut warned = warning.is_none();
    let mut warn_before = |out: &mut dyn Write, idx: usize| -> std::io::Result<()> {
        if !warned && cutoff.is_some_and(|c| c <= idx) {
            warned = true;
            write!(out, "{}", warning.as_deref().unwrap_or_default())?;
        }
        Ok(())
    };
    match inv.printout_pixel {
        Some((f, s)) if f >= 0 => {
            let in_detector = s >= 0 && (f as usize) < fp && (s as usize) < sp;
            let idx = if in_detector { s as usize * fp + f as usize } else { usize::MAX };
            let start_on = plan.interpolation == nanobragg_core::setup::Interpolation::Tricubic;
            let mut interp = start_on && cutoff.is_none_or(|c| idx <= c);
            let trace = if in_detector {
                trace_pixel(plan, f as usize, s as usize, &mut interp)
            } else {
                None
            };
            match trace {
                Some(t) => {
                    warn_before(out, idx)?;
                    write!(out, "{}", report::trace_text(&t, image[idx]))?;
                }
                None if in_detector => eprintln!(
                    "warning: -printout_pixel {f} {s}: that pixel is not rendered (outside -roi or masked)"
                ),
                None => eprintln!(
                    "warning: -printout_pixel {f} {s}: that pixel is outside the {fp} x {sp} pixel detector"
                ),
            }
        }
        Some(_) | None => {
            // every pixel, a few rows at a time
            let rows = (65536 / fp.max(1)).max(1);
            for first in (0..sp).step_by(rows) {
                let range = first * fp..((first + rows).min(sp)) * fp;
                for t in trace_range(plan, range, cutoff) {
                    let idx = t.spixel * fp + t.fpixel;
                    warn_before(out, idx)?;
                    write!(out, "{}", report::trace_text(&t, image[idx]))?;
                }
            }
        }
    }
    // after the traced pixel(s), or wherever the render (in f32, say) left the grid
    if !warned {
        write!(out, "{}", warning.as_deref().unwrap_or_default())?;
    }
    Ok(())
}

/// The SMV header fields of this run's integer images.
pub(crate) fn smv_header(plan: &Plan) -> SmvHeaderFields {
    let d = &plan.detector;
    SmvHeaderFields {
        fpixels: d.fpixels,
        spixels: d.spixels,
        pixel_size_mm: d.pixel_size_m * 1000.0,
        distance_mm: d.distance_m * 1000.0,
        wavelength_a: plan.sources.central_lambda_m * 1e10,
        beam_center_x_mm: d.xbeam_m * 1000.0,
        beam_center_y_mm: d.ybeam_m * 1000.0,
        adxv_center_x_mm: d.fbeam_m * 1000.0,
        adxv_center_y_mm: (d.detsize_s_m - d.sbeam_m) * 1000.0,
        mosflm_center_x_mm: (d.sbeam_m - 0.5 * d.pixel_size_m) * 1000.0,
        mosflm_center_y_mm: (d.fbeam_m - 0.5 * d.pixel_size_m) * 1000.0,
        denzo_x_beam_mm: (d.sbeam_m - 0.0 * d.pixel_size_m) * 1000.0,
        denzo_y_beam_mm: (d.fbeam_m - 0.0 * d.pixel_size_m) * 1000.0,
        dials_origin_mm: d.dials_origin_mm,
        xds_orgx: d.orgx,
        xds_orgy: d.orgy,
        close_distance_mm: d.close_distance_m * 1000.0,
        phi_deg: plan.phi0_rad * nanobragg_core::units::RTD,
        osc_start_deg: plan.phi0_rad * nanobragg_core::units::RTD,
        osc_range_deg: plan.osc_rad * nanobragg_core::units::RTD,
        twotheta_deg: d.twotheta_rad * nanobragg_core::units::RTD,
    }
}

/// Execute a parsed command line.
pub fn run(inv: Invocation) -> Result<()> {
    if inv.help {
        // (print! would panic on a closed pipe: `nanobragg -h | head`)
        std::io::stdout().lock().write_all(crate::flags::help_text().as_bytes())?;
        return Ok(());
    }
    for w in &inv.warnings {
        eprintln!("warning: {w}");
    }
    if inv.threads > 0 {
        // every parallel pass (statistics, conversions) then keeps to -threads
        let _ = rayon::ThreadPoolBuilder::new().num_threads(inv.threads).build_global();
    }
    let clock = clock_seed();
    // nanoBragg.c keeps seeds negated; an absent -seed/-misset_seed means the clock
    let noise_idum = -inv.seed.unwrap_or(clock);
    let misset_idum = match inv.config.crystal.misset_seed {
        Some(s) => -s,
        None => -clock,
    };
    if !inv.config.detector.panels.is_empty() {
        return run_panels(&inv, SetupSeeds { misset_idum }, noise_idum);
    }
    let plan = Plan::new(&inv.config, SetupSeeds { misset_idum }).map_err(|e| explain(e, &inv))?;
    // refuse a bad -gradient before writing anything
    if let Some((_, Some(skipped))) = crate::gradient::selected(&inv, &inv.config, &plan)? {
        eprintln!("note: {skipped}");
    }
    response(&inv.outputs, plan.detector.pixel_size_m)?; // and a bad detector response
    if inv.config.detector.curved {
        // (their geometry is a flat module's: a reader would place the pixels elsewhere)
        for (flag, given) in
            [("-nxmxfile", &inv.outputs.nxmxfile), ("-cbffile", &inv.outputs.cbffile)]
        {
            if given.is_some() {
                bail!("{flag}: the file describes a flat detector; -curved_det places the pixels on a sphere (write -floatfile, -intfile or -noisefile)");
            }
        }
    }
    if let Some(batch) = &inv.batch_path {
        let noise_seed = inv.seed.unwrap_or(clock);
        return crate::batch::run_batch(&inv, batch, SetupSeeds { misset_idum }, noise_seed);
    }
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
    let gradient_files = crate::gradient::open(&inv, &inv.config, &plan)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report(&mut out, &plan, &inv, noise_idum)?;

    let gpu = uses_gpu(&inv);
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
        render_with_progress(&plan, &inv, show_progress, gpu, mapped.as_deref_mut())?;
    let image: &[f32] = match (&owned, mapped) {
        (Some(image), _) => image,
        (None, Some(map)) => map,
        (None, None) => unreachable!("a render without a target returns its image"),
    };
    crate::render::check_finite_image(image, &inv, &plan)?;
    traces(&mut out, &plan, &inv, image, &rendered)?;
    writeln!(out)?;
    solid_angle_line(&mut out, rendered.omega_sum, plan.steps)?;
    if owned.is_some() {
        files.float.write(|w| le::write_le(w, image)).map_err(|e| write_error("-floatfile", e))?;
    }
    write_images(&mut out, &plan, None, &inv, image, &rendered, files.images(), noise_idum)?;
    drop(float_map);
    let seeds = SetupSeeds { misset_idum };
    let gradients = crate::gradient::write(
        &inv,
        &[(&inv.config, &plan)],
        None,
        seeds,
        &mut out,
        gradient_files,
    )?;
    // all together, so that an error or a signal before here changes no output
    files.commit(gradients)?;
    out.flush()?;
    Ok(())
}

/// The line nanoBragg.c prints of the solid angle the samples saw
/// (`omega_sum` over `steps` samples per pixel).
fn solid_angle_line(out: &mut impl Write, omega_sum: f64, steps: usize) -> Result<()> {
    let steps = steps as f64;
    writeln!(
        out,
        "solid angle subtended by detector = {} steradian ( {}% sphere)",
        g(omega_sum / steps),
        g(100.0 * omega_sum / steps / 4.0 / std::f64::consts::PI)
    )?;
    Ok(())
}

/// A run of a multi-panel detector (`-expt`): every panel planned and
/// rendered alone (the single custom-vector panel of its own vectors, see
/// `nanobragg_core::geometry::panel_configs`), the images stacked along
/// slow in the file's panel order (panels of equal width), then written as
/// one image (NXmx: one module per panel); statistics per panel and
/// overall; derivative images stacked the same way.
fn run_panels(inv: &Invocation, seeds: SetupSeeds, noise_idum: i64) -> Result<()> {
    let run = PanelRun::new(inv, &inv.config, seeds)?;
    let o = &inv.outputs;
    if o.cbffile.is_some() {
        return Err(anyhow!(
            "-cbffile: miniCBF holds one panel; this detector has {}: write -nxmxfile",
            inv.config.detector.panels.len()
        ));
    }
    let (plans, layout) = (&run.plans, &run.layout);
    // refuse a bad -gradient before writing anything
    if let Some((_, Some(skipped))) = crate::gradient::selected(inv, &run.configs[0], &plans[0])? {
        eprintln!("note: {skipped}");
    }
    response(o, plans[0].detector.pixel_size_m)?;
    if let Some(batch) = &inv.batch_path {
        let noise_seed = -noise_idum;
        return crate::batch::run_batch(inv, batch, seeds, noise_seed);
    }
    inv.check_device()?;
    let mut files = OutputFiles::open(o)?;
    let gradient_files = crate::gradient::open(inv, &run.configs[0], &plans[0])?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report(&mut out, &plans[0], inv, noise_idum)?;
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
            panel_traces(&mut out, &run, k, inv, image, panel_info.interpolation_fallback)?;
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
    solid_angle_line(&mut out, info.omega_sum, plans[0].steps)?;
    if !mapped {
        files.float.write(|w| le::write_le(w, image)).map_err(|e| write_error("-floatfile", e))?;
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

/// `-printout` of panel `k` of a multi-panel run: its pixels' traces (or
/// that of `-printout_pixel`, given in the whole image, where it falls on
/// this panel), with the whole image's pixel indices.
/// `fallback`: where the panel's tricubic interpolation left the grid.
fn panel_traces(
    out: &mut impl Write,
    run: &PanelRun,
    k: usize,
    inv: &Invocation,
    image: &[f32],
    fallback: Option<([f64; 3], [i64; 3])>,
) -> Result<()> {
    let (plan, [x0, y0], [fp, sp]) = (&run.plans[k], run.layout.origins[k], run.layout.sizes[k]);
    let width = run.layout.width;
    let cutoff = fallback.and_then(|_| interpolation_cutoff(plan));
    let start_on = plan.interpolation == nanobragg_core::setup::Interpolation::Tricubic;
    let show = |out: &mut dyn Write, mut t: nanobragg_core::render::trace::PixelTrace| {
        (t.fpixel, t.spixel) = (t.fpixel + x0, t.spixel + y0);
        write!(out, "{}", report::trace_text(&t, image[t.spixel * width + t.fpixel]))
    };
    match inv.printout_pixel {
        Some((f, s)) if f >= 0 => {
            let Some((f, s)) = run.on_panel(k, f, s) else { return Ok(()) };
            let idx = s * fp + f;
            let mut interp = start_on && cutoff.is_none_or(|c| idx <= c);
            match trace_pixel(plan, f, s, &mut interp) {
                Some(t) => show(out, t)?,
                None => eprintln!(
                    "warning: -printout_pixel {} {}: that pixel is not rendered (outside -roi or masked)",
                    f + x0,
                    s + y0
                ),
            }
        }
        Some(_) | None => {
            // every pixel, a few rows at a time
            let rows = (65536 / fp.max(1)).max(1);
            for first in (0..sp).step_by(rows) {
                let range = first * fp..((first + rows).min(sp)) * fp;
                for t in trace_range(plan, range, cutoff) {
                    show(out, t)?;
                }
            }
        }
    }
    Ok(())
}

/// Prints the setup report (writing the Fdump file where nanoBragg.c does),
/// each line as it comes: the per-step lines (one per sensor layer, phi
/// step, wavelength and source) are never held in memory together.
fn report(out: &mut impl Write, plan: &Plan, inv: &Invocation, noise_idum: i64) -> Result<()> {
    let mut lines = Vec::new();
    for w in &plan.warnings {
        if !matches!(w, nanobragg_core::error::Warning::Undersampled(..)) {
            lines.push(report::warning_text(w));
        }
    }
    lines.push("nanobragg nanocrystal diffraction simulator (Rust port of nanoBragg by James Holton and Ken Frankel)".into());
    report::setup_lines(plan, &mut lines);

    // structure factors: report reading and keep the dump for next time, as C does
    match &inv.config.sf.source {
        SfSource::Dump(_) => {
            lines.push(format!("reading Fs from {}", inv.outputs.dumpfile.display()))
        }
        SfSource::Hkl(entries) => {
            let hkl = inv.hkl_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            lines.push(format!("counting entries in {hkl}"));
            for w in nanobragg_core::sf::hkl::non_integer_warnings(entries) {
                lines.push(w.message(g));
            }
            if inv.config.sf.default_f != 0.0 {
                lines.push(format!("initializing to default_F = {}:", g(inv.config.sf.default_f)));
                lines.push("done initializing:".into());
            }
            lines.push(format!("re-reading {hkl}"));
            if let Some(grid) = &plan.grid {
                print_lines(out, &mut lines)?;
                write_dump(out, &inv.outputs.dumpfile, grid)?;
            }
        }
        SfSource::None => {}
    }
    print_lines(out, &mut lines)?;
    report::sampling_lines(plan, out)?;
    report::summary_lines(
        plan,
        inv.mask_path.as_ref().map(|p| p.to_str().unwrap_or("mask")),
        &mut lines,
    );
    if inv.outputs.calculate_noise {
        lines.push(String::new());
        lines.push("  noise image paramters:".into());
        lines.push(format!("  seed: {noise_idum}"));
        lines.push(format!("  water droplet size: {} m", g(plan.water_size_m)));
    }
    print_lines(out, &mut lines)?;
    out.flush()?;
    Ok(())
}

/// Prints `lines` and empties it.
fn print_lines(out: &mut impl Write, lines: &mut Vec<String>) -> Result<()> {
    for l in lines.drain(..) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// Writes the Fdump file of `grid` (streamed, through a temporary renamed
/// into place) with nanoBragg.c's line. A file that cannot be opened is C's
/// warning and the run goes on; a write that fails after it was opened (a
/// full disk) is an error naming `-dump` and the file.
fn write_dump(out: &mut impl Write, path: &Path, grid: &nanobragg_core::sf::HklGrid) -> Result<()> {
    let shown = path.display();
    let opened = Pending::create(path).and_then(|mut file| file.open().map(|()| file));
    let Ok(mut file) = opened else {
        writeln!(out, "WARNING: unable to open dump file: {shown}")?;
        return Ok(());
    };
    writeln!(out, "writing dump file for next time: {shown}")?;
    // the line is out before a write error's message
    out.flush()?;
    file.write(|w| write_fdump_to(w, grid)).map_err(|e| write_error("-dump", e))?;
    file.commit().map_err(|e| write_error("-dump", e))
}

/// The image statistics, with the integer image written on the way (where
/// there is a `file`): where the CPU render gathered each row's sums, the
/// RMSD's pass over the image rides along with the int conversion. Returns
/// them with the int scale.
fn statistics_and_int_image(
    file: Option<&mut Pending>,
    plan: &Plan,
    o: &Outputs,
    image: &[f32],
    rendered: &RenderInfo,
) -> (ImageStats, f64, Result<(), IoError>) {
    let d = &plan.detector;
    let (fp, sp, roi, mask) = (d.fpixels, d.spixels, d.roi, plan.mask.as_deref());
    let from_rows = rendered.rows.len() == sp;
    let mut stats = if from_rows {
        stats_but_rmsd(fp, &rendered.rows)
    } else {
        image_stats(image, fp, roi, mask)
    };
    let mut int_scale = o.int_scale;
    if int_scale <= 0.0 {
        int_scale = if stats.max_i > 0.0 { 55000.0 / stats.max_i } else { 1.0 };
    }
    let Some(file) = file else {
        if from_rows {
            stats.rmsd = rmsd(image, fp, sp, roi, stats.mean);
        }
        return (stats, int_scale, Ok(()));
    };
    let devs: Vec<AtomicU64> =
        if from_rows { (0..sp).map(|_| AtomicU64::new(0)).collect() } else { Vec::new() };
    let mean = stats.mean;
    let written = smv::write_smv_rows(file, &smv_header(plan), |row, block| {
        pgm::int_rows_visiting(image, fp, roi, int_scale, o.adc_offset, row, block, |s, v| {
            if let Some(d) = devs.get(s) {
                d.store(row_deviation(v, mean).to_bits(), Ordering::Relaxed);
            }
        })
    });
    if from_rows {
        stats.rmsd = if written.is_ok() {
            let devs: Vec<f64> = roi_rows(roi, sp)
                .map(|s| f64::from_bits(devs[s].load(Ordering::Relaxed)))
                .collect();
            rmsd_from_deviations(&devs, fp, sp, roi)
        } else {
            rmsd(image, fp, sp, roi, mean)
        };
    }
    (stats, int_scale, written)
}

/// noisify's calibration seed word when none is given (it acts as seed 1).
pub(crate) const NOISIFY_CALIB_IDUM: i64 = 123456789;

/// The noise image's detector response (noisify's options), `None` when no
/// option asks for one; options that need another one are refused.
pub(crate) fn response(o: &Outputs, pixel_size_m: f64) -> Result<Option<Response>> {
    let r = &o.response;
    if r.psf.is_none() && (r.psf_fwhm_um.is_some() || r.psf_radius.is_some()) {
        bail!("-psf_fwhm and -psf_radius shape the point-spread function: give -psf gauss|fiber");
    }
    if r.calib_seed.is_some() && r.calibration_noise <= 0.0 {
        bail!("-calib_seed seeds the calibration error: give -calibration > 0");
    }
    if !r.is_set() {
        return Ok(None);
    }
    if !o.calculate_noise {
        bail!("-readout_noise, -flicker, -calibration, -gain, -psf and -bits shape the noise image: -nonoise leaves none (drop -nonoise, or these flags)");
    }
    // held in single precision, as noisify holds it
    let fwhm_m = (r.psf_fwhm_um.unwrap_or(46.0) / 1e6) as f32;
    let psf =
        r.psf.map(|shape| (shape, fwhm_m as f64 / pixel_size_m, r.psf_radius.unwrap_or(0) as i32));
    Ok(Some(Response {
        gain: r.gain.unwrap_or(1.0),
        adc_offset: o.adc_offset,
        readout_noise: r.readout_noise,
        flicker_noise: r.flicker_noise,
        calibration_noise: r.calibration_noise,
        psf,
        bits: if r.bits32 { Bits::U32 } else { Bits::U16 },
    }))
}

/// Writes the integer, PGM and noise images into their temporaries and
/// prints the statistics, as nanoBragg.c does after the float image.
/// `panels`: a multi-panel detector's panels and where they lie in the
/// image, for the NXmx file (`None`: the one panel of `plan`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_images(
    out: &mut impl Write,
    plan: &Plan,
    panels: Option<(&[&Detector], &PanelLayout)>,
    inv: &Invocation,
    image: &[f32],
    rendered: &RenderInfo,
    files: ImageFiles<'_>,
    noise_idum: i64,
) -> Result<()> {
    let (o, d) = (&inv.outputs, &plan.detector);
    let (fp, sp, roi) = (d.fpixels, d.spixels, d.roi);
    let writes_int = files.int.is_some();
    let (stats, int_scale, int_written) =
        statistics_and_int_image(files.int, plan, o, image, rendered);
    writeln!(out, "writing {} as {} 4-byte floats", o.floatfile.display(), fp * sp)?;
    let subpixel = d.pixel_size_m / plan.oversample as f64;
    let last = (plan.oversample - 1) as f64;
    let at = |i: usize| subpixel * (i as f64 * plan.oversample as f64 + last) + subpixel / 2.0;
    let (max_x, max_y) = if stats.count == 0 || stats.max_i <= 0.0 {
        (0.0, 0.0)
    } else {
        (at(stats.max_f), at(stats.max_s))
    };
    writeln!(out, "max_I = {}  at {} {}", g(stats.max_i), g(max_x), g(max_y))?;
    writeln!(out, "mean= {} rms= {} rmsd= {}", g(stats.mean), g(stats.rms), g(stats.rmsd))?;
    if writes_int {
        writeln!(out, "intfile_scale = {}", g(int_scale))?;
        writeln!(out, "writing {} as 2-byte integers", o.intfile.display())?;
    }
    int_written.map_err(|e| write_error("-intfile", e))?;

    if let Some(file) = files.pgm {
        let mut pgm_scale = o.pgm_scale;
        if pgm_scale <= 0.0 {
            pgm_scale = if stats.rmsd > 0.0 { 250.0 / (5.0 * stats.rmsd) } else { int_scale };
        }
        writeln!(out, "pgm_scale = {}", g(pgm_scale))?;
        let bytes = pgm::pgm_bytes(image, fp, sp, roi, pgm_scale);
        writeln!(out, "writing {} as 1-byte integers", o.pgmfile.display())?;
        pgm::write_pgm(file, fp, sp, pgm_scale, &bytes).map_err(|e| write_error("-pgmfile", e))?;
    }
    // the int32 image of -nxmxfile and -cbffile: the noise image's draws
    // when there is noise, else the -intfile conversion, neither clipped at 65535
    let wide = files.nxmx.is_some() || files.cbf.is_some();
    let mut pixels32 = (wide && !o.calculate_noise)
        .then(|| pgm::int_image_i32(image, fp, sp, roi, int_scale, o.adc_offset));
    if files.noise.is_some() || (wide && o.calculate_noise) {
        // -bits 32: the noise file's own 32-bit pixels
        let mut noise32 = None;
        let pixels = match response(o, d.pixel_size_m)? {
            None => {
                let mut rng = NoiseRng::new(noise_idum);
                let (noise, wide_pixels) = nanobragg_core::noise::noise_image_wide(
                    image,
                    fp,
                    sp,
                    roi,
                    o.adc_offset,
                    &mut rng,
                    wide,
                );
                let photons = nanobragg_io::cfmt::f(noise.photons, 0);
                writeln!(out, "{photons} photons on noise image ({} overloads)", noise.overloads)?;
                if wide {
                    pixels32 = Some(wide_pixels);
                }
                noise.pixels
            }
            Some(response) => {
                let calib_idum = o.response.calib_seed.map_or(NOISIFY_CALIB_IDUM, |s| -s);
                let mut seeds = SharedSeeds::new(noise_idum, calib_idum);
                // the PSF spreads light within each panel
                let whole;
                let tiles = match panels {
                    None => {
                        whole = PanelLayout::whole(fp, sp);
                        &whole
                    }
                    Some((_, layout)) => layout,
                };
                let noisy = noisy_image_tiled(image, tiles, &response, &mut seeds);
                if let Some(before) = noisy.photons_before_psf {
                    writeln!(
                        out,
                        "{} photons on noise image before PSF",
                        nanobragg_io::cfmt::f(before, 0)
                    )?;
                    for (k, psf) in noisy.psf.iter().enumerate() {
                        if panels.is_some() {
                            writeln!(out, "  panel {}:", inv.config.detector.panels[k].name)?;
                        }
                        crate::noisify::report_psf(psf, out)?;
                    }
                }
                let photons = nanobragg_io::cfmt::f(noisy.photons, 0);
                writeln!(out, "{photons} photons on noise image ({} overloads)", noisy.overloads)?;
                if wide {
                    // 32-bit ADU clipped at 2^31 - 1; a negative count wrapped, as i32 it is back
                    pixels32 = Some(noisy.pixels32.iter().map(|&p| p as i32).collect());
                }
                if response.bits == Bits::U32 {
                    noise32 = Some(noisy.pixels32);
                }
                noisy.pixels16
            }
        };
        if let Some(file) = files.noise {
            let written = match &noise32 {
                Some(p32) => {
                    writeln!(out, "writing {} as 4-byte integers", o.noisefile.display())?;
                    smv::write_smv32(file, &smv_header(plan), p32)
                }
                None => {
                    writeln!(out, "writing {} as 2-byte integers", o.noisefile.display())?;
                    smv::write_smv(file, &smv_header(plan), &pixels)
                }
            };
            written.map_err(|e| write_error("-noisefile", e))?;
        }
    }
    if let Some(pixels) = &pixels32 {
        // each panel's pixels in one piece
        let parts: Vec<Vec<i32>> = panels.map_or(Vec::new(), |(_, layout)| {
            (0..layout.origins.len()).map(|k| layout.get(k, pixels)).collect()
        });
        let with_pixels: Vec<(&Detector, &[i32])> = match panels {
            None => vec![(d, &pixels[..])],
            Some((detectors, _)) => {
                detectors.iter().copied().zip(parts.iter().map(|v| &v[..])).collect()
            }
        };
        let img = mx_image(plan, &with_pixels, o);
        if let Some(file) = files.nxmx {
            writeln!(out, "writing {} as NXmx (HDF5) with 4-byte integers", shown(&o.nxmxfile))?;
            nanobragg_io::nxmx::write_nxmx(file, &img, o.nxmx_compression)
                .map_err(|e| write_error("-nxmxfile", e))?;
        }
        if let Some(file) = files.cbf {
            writeln!(out, "writing {} as miniCBF with 4-byte integers", shown(&o.cbffile))?;
            nanobragg_io::cbf::write_cbf(file, &img).map_err(|e| write_error("-cbffile", e))?;
        }
    }
    Ok(())
}

/// An optional output's name as the run's lines show it.
fn shown(path: &Option<std::path::PathBuf>) -> std::path::Display<'_> {
    path.as_deref().unwrap_or(Path::new("")).display()
}

/// The saturation value of the int32 images: their clip.
pub const SATURATION_I32: i32 = i32::MAX;

/// The spectrum as rendered: (wavelength Å, weight), each source counting
/// its weight where the render weights them, else once.
pub(crate) fn plan_spectrum(plan: &Plan) -> Vec<(f64, f64)> {
    let mut spectrum_a: Vec<(f64, f64)> = Vec::new();
    // each wavelength's place in the list, in the order of first appearance
    // (a lookup per source: a spectrum of 10⁶ lines stays linear)
    let mut index: std::collections::HashMap<u64, usize> =
        std::collections::HashMap::with_capacity(plan.sources.list.len());
    for s in &plan.sources.list {
        let lambda_a = s.lambda_m * 1e10;
        // (each source counts once where the render does not weight them)
        let weight = if plan.sources.weighted { s.weight } else { 1.0 };
        // (+0.0 and -0.0 are one wavelength, as == has them)
        let key = (lambda_a + 0.0).to_bits();
        match index.entry(key) {
            std::collections::hash_map::Entry::Occupied(at) => spectrum_a[*at.get()].1 += weight,
            std::collections::hash_map::Entry::Vacant(at) => {
                at.insert(spectrum_a.len());
                spectrum_a.push((lambda_a, weight));
            }
        }
    }
    if spectrum_a.is_empty() {
        spectrum_a.push((plan.lambda0_m * 1e10, 1.0));
    }
    spectrum_a
}

/// The int32 image of this run, each panel with its pixels, with its
/// geometry and values, for the NXmx and CBF writers (the detector-wide
/// values, distance and beam centre, are `plan`'s).
pub(crate) fn mx_image<'a>(
    plan: &Plan,
    panels: &[(&Detector, &'a [i32])],
    o: &Outputs,
) -> MxImage<'a> {
    use nanobragg_core::units::RTD;
    let d = &plan.detector;
    let spectrum_a = plan_spectrum(plan);
    // pixels cannot be negative without a negative offset or read-out noise:
    // then -1 marks an invalid pixel, as on Pilatus detectors; else no value does
    let underload_value =
        if !o.calculate_noise || (o.adc_offset >= 0.0 && o.response.readout_noise <= 0.0) {
            -1
        } else {
            i32::MIN
        };
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    let end = start + plan.exposure_s.max(0.0).round() as u64;
    MxImage {
        panels: panels
            .iter()
            .map(|&(p, pixels)| Panel {
                origin_m: p.pix0,
                fast: p.fdet,
                slow: p.sdet,
                pixel_size_m: p.pixel_size_m,
                fpixels: p.fpixels,
                spixels: p.spixels,
                pixels,
            })
            .collect(),
        beam: d.beam,
        polar: d.polar,
        spindle: d.spindle,
        wavelength_a: plan.sources.central_lambda_m * 1e10,
        spectrum_a,
        kahn_factor: plan.kahn_factor,
        distance_m: d.distance_m,
        beam_centre_px: [d.fbeam_m / d.pixel_size_m, d.sbeam_m / d.pixel_size_m],
        exposure_s: plan.exposure_s,
        phi_start_deg: plan.phi0_rad * RTD,
        phi_range_deg: plan.osc_rad * RTD,
        saturation_value: SATURATION_I32,
        underload_value,
        sensor_material: "Si".into(),
        sensor_thickness_m: d.thick_m,
        start_time: utc_iso8601(start),
        end_time: utc_iso8601(end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_wraps_the_work() {
        let slow = || {
            std::thread::sleep(Duration::from_millis(60));
            42
        };
        assert_eq!(with_progress(true, Duration::from_millis(5), "slow work", slow), 42);
        assert_eq!(with_progress(true, Duration::from_secs(5), "quick work", || 7), 7);
        assert_eq!(with_progress(false, Duration::ZERO, "hidden", || "x"), "x");
    }

    #[test]
    #[should_panic(expected = "worker failed")]
    fn progress_passes_on_a_panic() {
        with_progress(true, Duration::from_millis(1), "failing work", || -> u8 {
            panic!("worker failed")
        });
    }

    #[test]
    fn writable_checks() {
        let dir = std::env::temp_dir().join(format!("nanobragg-writable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = open_output("-floatfile", &dir.join("x.bin")).unwrap();
        let e = open_output("-intfile", &dir.join("no/x.img")).err().unwrap().to_string();
        assert!(e.starts_with("-intfile: cannot write") && e.contains("does not exist"), "{e}");
        let e = open_output("-pgmfile", &dir).err().unwrap().to_string();
        assert!(e.contains("is a directory"), "{e}");
        assert!(open_output("-noisefile", Path::new("")).is_err());
        // an output not committed leaves nothing behind
        drop(file);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}
