//! One nanoBragg run: plan, check the outputs, render, report, write outputs.
//!
//! Everything that can be refused is refused before anything is written: the
//! plan (inputs, values, memory) is resolved and every output path is checked
//! first. The images are then written under temporary names beside their
//! targets and renamed into place together at the end, so a run that fails
//! leaves none of its outputs behind (the Fdump file, a cache of the structure
//! factors that nanoBragg.c writes before rendering, is the one exception).
//! A short render refills old float and int files in place under their
//! temporary names (see [`REUSE_MAX_STEPS`]); if it fails, those old files
//! are gone with the temporaries.

use crate::parse::{Device, Dtype, Invocation, Outputs};
use crate::report;
use anyhow::{anyhow, bail, Result};
use nanobragg_core::config::SfSource;
use nanobragg_core::render::trace::{interpolation_cutoff, trace_pixel, trace_range};
use nanobragg_core::render::{cpu, Precision, RenderInfo, RenderOptions};
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::sf::fdump::write_fdump;
use nanobragg_core::stats::{
    image_stats, rmsd, rmsd_from_deviations, roi_rows, row_deviation, stats_but_rmsd,
};
use nanobragg_io::cfmt::g;
use nanobragg_io::mapped::MappedFile;
use nanobragg_io::smv::SmvHeaderFields;
use nanobragg_io::IoError;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn clock_seed() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Adds the flag and file a setup error comes from, where the library's
/// message does not say.
fn explain(e: nanobragg_core::Error, inv: &Invocation) -> anyhow::Error {
    use nanobragg_core::Error as E;
    let sf_file = || match (&inv.config.sf.source, &inv.hkl_path) {
        (SfSource::Hkl(_), Some(p)) => Some(format!("-hkl {}", p.display())),
        (SfSource::Dump(_), _) => Some(format!("-dump {}", inv.outputs.dumpfile.display())),
        _ => None,
    };
    // a value an -img/-mask header set and no flag overrode
    let from_header = |flag: &str, value: f64| {
        inv.header_values
            .iter()
            .rev()
            .find(|(f, _, v)| *f == flag && *v == value)
            .map(|h| h.1.clone())
    };
    let c = &inv.config;
    let context = match &e {
        E::Invalid { what: "-lambda", .. } => from_header("-lambda", c.beam.lambda_a),
        E::Invalid { what: "-pixel", .. } => from_header("-pixel", c.detector.pixel_mm),
        E::Invalid { what: "-distance", .. } => from_header("-distance", c.detector.distance_mm),
        E::TooLarge { what, .. } if what.contains("structure factor") => sf_file(),
        E::Invalid { what: "hkl", .. } => sf_file(),
        E::Invalid { what: "-mask", .. } => {
            inv.mask_path.as_ref().map(|p| format!("-mask {}", p.display()))
        }
        E::Invalid { what: "-sourcefile", .. } => {
            inv.source_path.as_ref().map(|p| format!("-sourcefile {}", p.display()))
        }
        E::Invalid { what: "-mat", .. } => {
            inv.mat_path.as_ref().map(|p| format!("-mat {}", p.display()))
        }
        _ => None,
    };
    match (context, &e) {
        // the context names the flag already
        (Some(c), E::Invalid { msg, .. }) => anyhow!("{c}: {msg}"),
        (Some(c), _) => anyhow!("{c}: {e}"),
        (None, _) => anyhow!("{e}"),
    }
}

/// A path that exists and is neither a regular file nor a directory (a device
/// such as /dev/null, or a pipe): written in place, never replaced.
fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Where a file is really written: the file a symbolic link points to (as
/// the C program, which opens the path, would write there), else the path.
fn resolve(path: &Path) -> PathBuf {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        if let Ok(real) = std::fs::canonicalize(path) {
            return real;
        }
    }
    path.to_path_buf()
}

/// The directory a file would be created in.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

static PROBE: AtomicU64 = AtomicU64::new(0);

/// Checks that `path` can be written, creating and removing a scratch file
/// in its directory; the error names the flag and the file.
fn check_writable(flag: &str, path: &Path) -> Result<()> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("{flag}: the file name is empty");
    }
    let real = resolve(path);
    let path = real.as_path();
    if let Ok(m) = std::fs::metadata(path) {
        if m.is_dir() {
            bail!("{flag}: cannot write '{shown}': it is a directory");
        }
        if !m.is_file() {
            // a device or pipe: opening a pipe to test it would block or
            // signal its reader, so it is only checked when written
            return Ok(());
        }
    }
    let dir = parent_dir(path);
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{flag}: cannot write '{shown}': directory '{}' does not exist", dir.display())
        }
        Err(e) => bail!("{flag}: cannot write '{shown}': {}: {e}", dir.display()),
        Ok(m) if !m.is_dir() => {
            bail!("{flag}: cannot write '{shown}': '{}' is not a directory", dir.display())
        }
        Ok(_) => {}
    }
    let n = PROBE.fetch_add(1, Ordering::Relaxed);
    let probe = dir.join(format!(".nanobragg-probe.{}.{n}", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(f) => {
            drop(f);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => bail!("{flag}: cannot write '{shown}': {e}"),
    }
}

/// The output files this run will write, with the flag naming each.
fn output_files(o: &Outputs) -> Vec<(&'static str, &Path)> {
    let mut files = vec![("-floatfile", o.floatfile.as_path()), ("-intfile", o.intfile.as_path())];
    if o.write_pgm {
        files.push(("-pgmfile", o.pgmfile.as_path()));
    }
    if o.calculate_noise {
        files.push(("-noisefile", o.noisefile.as_path()));
    }
    files
}

/// Samples per pixel up to which old outputs are overwritten in place: for a
/// render this short the page cache's cost of a new file is a large part of
/// the run (a third at 4096² with one sample), while a long render, which is
/// more likely to be interrupted, keeps the old outputs until it is done.
const REUSE_MAX_STEPS: usize = 16;

/// Output files written under temporary names and renamed into place together
/// by [`Staging::commit`]; dropping it uncommitted removes the temporaries.
#[derive(Default)]
struct Staging {
    /// (temporary, target) pairs not yet renamed.
    pending: Vec<(PathBuf, PathBuf)>,
    /// The temporaries, removed if a signal stops the run.
    guards: Vec<crate::interrupt::Registered>,
}

impl Staging {
    /// The path to write `target`'s content to now.
    fn stage(&mut self, target: &Path) -> PathBuf {
        let target = &resolve(target);
        if is_special(target) {
            return target.to_path_buf();
        }
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let n = PROBE.fetch_add(1, Ordering::Relaxed);
        let tmp = parent_dir(target).join(format!(".{name}.partial.{}.{n}", std::process::id()));
        self.guards.extend(crate::interrupt::register(&tmp));
        self.pending.push((tmp.clone(), target.to_path_buf()));
        tmp
    }

    /// [`Self::stage`]; where `target` is a regular file with a single link,
    /// it is renamed to the temporary, to be overwritten in place
    /// (`MappedFile::reuse`): the new output then takes over the old one's
    /// pages instead of allocating new ones and freeing the old.
    fn stage_reusing(&mut self, target: &Path) -> PathBuf {
        let tmp = self.stage(target);
        if let Some((staged, target)) = self.pending.last() {
            if *staged == tmp && nanobragg_io::mapped::reusable(target) {
                let _ = std::fs::rename(target, &tmp);
            }
        }
        tmp
    }

    /// Renames every staged file onto its target (on failure, the ones not
    /// yet renamed are removed when `self` drops).
    fn commit(mut self) -> Result<()> {
        let mut pending = std::mem::take(&mut self.pending);
        // one output named twice (say -floatfile x -intfile x): the last
        // written wins, as in nanoBragg.c, not whichever rename ends last
        let mut i = 0;
        while i < pending.len() {
            if pending[i + 1..].iter().any(|(_, t)| *t == pending[i].1) {
                let (tmp, _) = pending.remove(i);
                let _ = std::fs::remove_file(tmp);
            } else {
                i += 1;
            }
        }
        // Renaming over a large old output frees its pages inside rename()
        // (tens of ms at 4096²): the files are renamed side by side (one by
        // one with -threads 1).
        let results: Vec<std::io::Result<()>> = if rayon::current_num_threads() == 1 {
            pending.iter().map(|(tmp, target)| std::fs::rename(tmp, target)).collect()
        } else {
            std::thread::scope(|scope| {
                let jobs: Vec<_> = pending
                    .iter()
                    .map(|(tmp, target)| scope.spawn(move || std::fs::rename(tmp, target)))
                    .collect();
                jobs.into_iter()
                    .map(|j| j.join().unwrap_or_else(|_| Err(std::io::Error::other("panicked"))))
                    .collect()
            })
        };
        let mut first_error = None;
        for ((tmp, target), r) in pending.iter().zip(results) {
            if let Err(e) = r {
                let _ = std::fs::remove_file(tmp);
                first_error
                    .get_or_insert_with(|| anyhow!("cannot write '{}': {e}", target.display()));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        for (tmp, _) in &self.pending {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// A writer's error, naming the flag and the file the user gave (not the
/// temporary actually written).
fn write_error(flag: &str, target: &Path, e: IoError) -> anyhow::Error {
    match e {
        IoError::Write { source, .. } => {
            anyhow!("{flag}: cannot write '{}': {source}", target.display())
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
    match inv.device {
        Device::Cpu => false,
        Device::Cuda => true,
        Device::Auto => nanobragg_cuda::device_info().is_ok(),
    }
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
    let precision = match inv.dtype {
        Dtype::Float64 if inv.exact => Precision::Exact64,
        Dtype::Float64 => Precision::Fast64,
        Dtype::Float32 => Precision::Fast32,
    };
    with_progress(show, PROGRESS_DELAY, &what, || {
        if gpu {
            return nanobragg_cuda::render(plan, precision)
                .map(|r| {
                    let (image, info) = r.into_parts();
                    (Some(image), info)
                })
                .map_err(|e| anyhow!("-device cuda: {e}"));
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
/// interpolation warning where nanoBragg.c prints it among them.
fn print_traces(
    out: &mut impl Write,
    plan: &Plan,
    inv: &Invocation,
    image: &[f32],
    rendered: &RenderInfo,
) -> Result<()> {
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

/// The float file's writer: finished, or running beside the other outputs.
enum FloatJob<'s> {
    Done(Result<()>),
    Running(std::thread::ScopedJoinHandle<'s, Result<()>>),
}

/// The SMV header fields of this run's integer images.
fn smv_header(plan: &Plan) -> SmvHeaderFields {
    let d = &plan.detector;
    SmvHeaderFields {
        fpixels: d.fpixels,
        spixels: d.spixels,
        pixel_size_mm: d.pixel_size_m * 1000.0,
        distance_mm: d.distance_m * 1000.0,
        wavelength_a: plan.lambda0_m * 1e10,
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
        print!("{}", crate::flags::help_text());
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
    let plan = Plan::new(&inv.config, SetupSeeds { misset_idum }).map_err(|e| explain(e, &inv))?;
    crate::gradient::params(&inv, &plan)?; // refuse a bad -gradient before writing anything
    if let Some(batch) = &inv.batch_path {
        return crate::batch::run_batch(&inv, batch, SetupSeeds { misset_idum });
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
    // refuse unwritable outputs before writing anything, the Fdump file included
    for (flag, path) in output_files(&inv.outputs) {
        check_writable(flag, path)?;
    }

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut lines = Vec::new();
    for w in &plan.warnings {
        if !matches!(w, nanobragg_core::error::Warning::Undersampled(..)) {
            lines.push(report::warning_text(w));
        }
    }
    lines.push("nanobragg nanocrystal diffraction simulator (Rust port of nanoBragg by James Holton and Ken Frankel)".into());
    report::setup_lines(&plan, &mut lines);

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
                match write_fdump(&inv.outputs.dumpfile, grid) {
                    Ok(()) => lines.push(format!(
                        "writing dump file for next time: {}",
                        inv.outputs.dumpfile.display()
                    )),
                    Err(_) => lines.push(format!(
                        "WARNING: unable to open dump file: {}",
                        inv.outputs.dumpfile.display()
                    )),
                }
            }
        }
        SfSource::None => {}
    }
    report::sampling_lines(&plan, &mut lines);
    report::summary_lines(
        &plan,
        inv.mask_path.as_ref().map(|p| p.to_str().unwrap_or("mask")),
        &mut lines,
    );
    if inv.outputs.calculate_noise {
        lines.push(String::new());
        lines.push("  noise image paramters:".into());
        lines.push(format!("  seed: {noise_idum}"));
        lines.push(format!("  water droplet size: {} m", g(plan.water_size_m)));
    }
    for l in &lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;

    let show_progress = inv.progress.unwrap_or_else(|| std::io::stderr().is_terminal());
    let d = &plan.detector;
    let (fp, sp) = (d.fpixels, d.spixels);
    let mask = plan.mask.as_deref();
    let roi = d.roi;
    let o = &inv.outputs;
    let mut staging = Staging::default();
    let gpu = uses_gpu(&inv);
    // short renders overwrite old outputs in place (see Staging::stage_reusing);
    // the float file only where the CPU renders into its mapping
    let reuse = plan.steps <= REUSE_MAX_STEPS;
    let float_tmp = if reuse && !gpu {
        staging.stage_reusing(&o.floatfile)
    } else {
        staging.stage(&o.floatfile)
    };
    let int_tmp = if reuse { staging.stage_reusing(&o.intfile) } else { staging.stage(&o.intfile) };
    let pgm_tmp = o.write_pgm.then(|| staging.stage(&o.pgmfile));
    let noise_tmp = o.calculate_noise.then(|| staging.stage(&o.noisefile));
    // the CPU renders straight into the (unnamed, mapped) float file
    let mut float_map = if gpu || is_special(&float_tmp) {
        None
    } else {
        // the temporary exists only where staging renamed an old output to it
        MappedFile::reuse_or_create(&float_tmp, fp * sp * 4)
            .map_err(|e| write_error("-floatfile", &o.floatfile, e))?
    };
    let (owned, rendered) = render_with_progress(
        &plan,
        &inv,
        show_progress,
        gpu,
        float_map.as_mut().map(|m| m.values_mut::<f32>(0)),
    )?;
    let image: &[f32] = match (&owned, &float_map) {
        (Some(image), _) => image,
        (None, Some(map)) => map.values::<f32>(0),
        (None, None) => unreachable!("a render without a target returns its image"),
    };
    if inv.printout {
        print_traces(&mut out, &plan, &inv, image, &rendered)?;
    } else if let Some((hkl, hkl0)) = rendered.interpolation_fallback {
        write!(out, "{}", report::interpolation_warning(hkl, hkl0))?;
    }
    writeln!(out)?;
    let steps = plan.steps as f64;
    writeln!(
        out,
        "solid angle subtended by detector = {} steradian ( {}% sphere)",
        g(rendered.omega_sum / steps),
        g(100.0 * rendered.omega_sum / steps / 4.0 / std::f64::consts::PI)
    )?;

    // Without a mapped float file (a GPU render, a device as the target, a
    // filesystem that cannot map) the float file is written by its own thread
    // while this one computes the statistics and writes the integer images,
    // so its page-cache copies overlap that work (-threads 1 keeps to one).
    std::thread::scope(|scope| -> Result<()> {
        let write_float = || {
            nanobragg_io::float::write_float_image(&float_tmp, image)
                .map_err(|e| write_error("-floatfile", &o.floatfile, e))
        };
        let float_job = if float_map.is_some() {
            FloatJob::Done(Ok(()))
        } else if rayon::current_num_threads() > 1 {
            FloatJob::Running(scope.spawn(write_float))
        } else {
            FloatJob::Done(write_float())
        };
        let rest = (|| -> Result<()> {
            // the CPU render gathered each row's sums as it went; the RMSD's
            // pass over the image rides along with the int conversion below
            let from_rows = rendered.rows.len() == sp;
            let mut stats = if from_rows {
                stats_but_rmsd(fp, &rendered.rows)
            } else {
                image_stats(image, fp, roi, mask)
            };
            let mut int_scale = o.int_scale;
            if int_scale <= 0.0 {
                int_scale = 1.0;
                if stats.max_i > 0.0 {
                    int_scale = 55000.0 / stats.max_i;
                }
            }
            let header = smv_header(&plan);
            let devs: Vec<AtomicU64> =
                if from_rows { (0..sp).map(|_| AtomicU64::new(0)).collect() } else { Vec::new() };
            let mean = stats.mean;
            // (an old int file renamed to the temporary is overwritten)
            let int_written =
                nanobragg_io::smv::write_smv_rows_reusing(&int_tmp, &header, |row, block| {
                    let (scale, adc) = (int_scale, o.adc_offset);
                    nanobragg_io::pgm::int_rows_visiting(
                        image,
                        fp,
                        roi,
                        scale,
                        adc,
                        row,
                        block,
                        |s, v| {
                            if let Some(d) = devs.get(s) {
                                d.store(row_deviation(v, mean).to_bits(), Ordering::Relaxed);
                            }
                        },
                    )
                });
            if from_rows {
                stats.rmsd = if int_written.is_ok() {
                    let devs: Vec<f64> = roi_rows(roi, sp)
                        .map(|s| f64::from_bits(devs[s].load(Ordering::Relaxed)))
                        .collect();
                    rmsd_from_deviations(&devs, fp, sp, roi)
                } else {
                    rmsd(image, fp, sp, roi, mean)
                };
            }
            writeln!(out, "writing {} as {} 4-byte floats", o.floatfile.display(), fp * sp)?;
            let subpixel = d.pixel_size_m / plan.oversample as f64;
            let last = (plan.oversample - 1) as f64;
            let at =
                |i: usize| subpixel * (i as f64 * plan.oversample as f64 + last) + subpixel / 2.0;
            let (max_x, max_y) = if stats.count == 0 || stats.max_i <= 0.0 {
                (0.0, 0.0)
            } else {
                (at(stats.max_f), at(stats.max_s))
            };
            writeln!(out, "max_I = {}  at {} {}", g(stats.max_i), g(max_x), g(max_y))?;
            writeln!(out, "mean= {} rms= {} rmsd= {}", g(stats.mean), g(stats.rms), g(stats.rmsd))?;
            writeln!(out, "intfile_scale = {}", g(int_scale))?;
            writeln!(out, "writing {} as 2-byte integers", o.intfile.display())?;
            int_written.map_err(|e| write_error("-intfile", &o.intfile, e))?;

            if let Some(pgm_tmp) = &pgm_tmp {
                let mut pgm_scale = o.pgm_scale;
                if pgm_scale <= 0.0 {
                    pgm_scale = int_scale;
                    if stats.rmsd > 0.0 {
                        pgm_scale = 250.0 / (5.0 * stats.rmsd);
                    }
                }
                writeln!(out, "pgm_scale = {}", g(pgm_scale))?;
                let bytes = nanobragg_io::pgm::pgm_bytes(image, fp, sp, roi, pgm_scale);
                writeln!(out, "writing {} as 1-byte integers", o.pgmfile.display())?;
                nanobragg_io::pgm::write_pgm(pgm_tmp, fp, sp, pgm_scale, &bytes)
                    .map_err(|e| write_error("-pgmfile", &o.pgmfile, e))?;
            }

            if let Some(noise_tmp) = &noise_tmp {
                let mut rng = NoiseRng::new(noise_idum);
                let noise =
                    nanobragg_core::noise::noise_image(image, fp, sp, roi, o.adc_offset, &mut rng);
                writeln!(
                    out,
                    "{} photons on noise image ({} overloads)",
                    nanobragg_io::cfmt::f(noise.photons, 0),
                    noise.overloads
                )?;
                writeln!(out, "writing {} as 2-byte integers", o.noisefile.display())?;
                nanobragg_io::smv::write_smv(noise_tmp, &header, &noise.pixels)
                    .map_err(|e| write_error("-noisefile", &o.noisefile, e))?;
            }
            Ok(())
        })();
        let float = match float_job {
            FloatJob::Done(done) => done,
            FloatJob::Running(job) => {
                job.join().map_err(|_| anyhow!("-floatfile: the writer panicked"))?
            }
        };
        // the float file's error first: it is the first output, as in C
        float.and(rest)
    })?;
    if let Some(map) = float_map {
        map.persist(&float_tmp).map_err(|e| write_error("-floatfile", &o.floatfile, e))?;
    }
    staging.commit()?;
    crate::gradient::write(&inv, &plan, SetupSeeds { misset_idum }, &mut out)?;
    out.flush()?;
    Ok(())
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
    fn staging_commits_or_cleans_up() {
        let dir = std::env::temp_dir().join(format!("nanobragg-staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.bin"), dir.join("b.bin"));
        std::fs::write(&b, b"old").unwrap();
        {
            let mut st = Staging::default();
            std::fs::write(st.stage(&a), b"new a").unwrap();
            std::fs::write(st.stage(&b), b"new b").unwrap();
            // dropped without commit: nothing changes, no temporaries left
        }
        assert!(!a.exists());
        assert_eq!(std::fs::read(&b).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let mut st = Staging::default();
        std::fs::write(st.stage(&a), b"new a").unwrap();
        std::fs::write(st.stage(&b), b"new b").unwrap();
        st.commit().unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"new a");
        assert_eq!(std::fs::read(&b).unwrap(), b"new b");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        // a symbolic link is written through, not replaced
        #[cfg(unix)]
        {
            let link = dir.join("link.bin");
            std::os::unix::fs::symlink(&a, &link).unwrap();
            let mut st = Staging::default();
            std::fs::write(st.stage(&link), b"via link").unwrap();
            st.commit().unwrap();
            assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
            assert_eq!(std::fs::read(&a).unwrap(), b"via link");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn writable_checks() {
        let dir = std::env::temp_dir().join(format!("nanobragg-writable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(check_writable("-floatfile", &dir.join("x.bin")).is_ok());
        let e = check_writable("-intfile", &dir.join("no/x.img")).unwrap_err().to_string();
        assert!(e.starts_with("-intfile: cannot write") && e.contains("does not exist"), "{e}");
        let e = check_writable("-pgmfile", &dir).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        assert!(check_writable("-noisefile", Path::new("")).is_err());
        // the probe leaves nothing behind
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}
