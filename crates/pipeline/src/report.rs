//! The console report: the lines nanoBragg.c prints, with its number formats
//! (and the Fdump file it writes among them).

use crate::invocation::Invocation;
use crate::output_files::write_error;
use anyhow::Result;
use nanobragg_core::config::{Convention, CrystalShape, Pivot, SfSource};
use nanobragg_core::error::Warning;
use nanobragg_core::geometry::Axes;
use nanobragg_core::render::trace::PixelTrace;
use nanobragg_core::setup::Plan;
use nanobragg_core::sf::fdump::write_fdump_to;
use nanobragg_core::units::RTD;
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::{f as cf, f_width, g};
use std::io::Write;
use std::path::Path;

/// The C program's wording of a setup warning.
pub fn warning_text(w: &Warning) -> String {
    match w {
        Warning::AutoOdetVector => "WARNING: auto-generating odet_vector".into(),
        Warning::AttenuationDepth(mu) => format!("WARNING: setting detector attenuation depth to {} m", g(*mu)),
        Warning::ClipSampleHigh(s, b) => format!("WARNING: clipping sample ({} m high) with beam ({} m)", g(*s), g(*b)),
        Warning::ClipSampleWide(s, b) => format!("WARNING: clipping sample ({} m wide) with beam ({} m)", g(*s), g(*b)),
        Warning::MosaicTenDomains => "WARNING: finite mosaicity with only one domain! upping to 10 mosaic domains".into(),
        Warning::MosaicNoSpread => "WARNING: no mosaic spread specified.  setting mosaic_domains = 1".into(),
        Warning::MosaicZeroSpread => "WARNING: zero mosaic spread specified.  setting mosaic_domains = 1".into(),
        Warning::ImpossibleCellVolume(v) => format!("WARNING: impossible unit cell volume: {}", g(*v)),
        Warning::ImpossibleReciprocalLengths(l) => {
            format!("WARNING: impossible reciprocal cell lengths: {} {} {}", g(l[0]), g(l[1]), g(l[2]))
        }
        Warning::Undersampled(x, r, n) => format!(
            "WARNING: maximum dimension of sample is {} A\n         but reciprocal pixel size is {} A\n         intensity may vary significantly across a pixel!\n         recommend -oversample {} to work around this",
            g(*x),
            g(*r),
            n
        ),
    }
}

fn v3(v: [f64; 3]) -> String {
    format!("{} {} {}", g(v[0]), g(v[1]), g(v[2]))
}

/// Geometry, cell and sampling lines printed before rendering.
pub fn setup_lines(plan: &Plan, out: &mut Vec<String>) {
    let d = &plan.detector;
    out.push(format!("{} convention selected.", Axes::name(d.convention)));
    out.push(match d.pivot {
        Pivot::Sample => "pivoting detector around sample".into(),
        Pivot::Beam => "pivoting detector around direct beam spot".into(),
    });
    out.push(format!("XDS incident beam: {}", v3(d.xds_incident)));
    match plan.interpolation_auto {
        Some(true) => out.push("auto-selected tricubic interpolation of structure factors".into()),
        Some(false) => out.push("auto-selected no interpolation".into()),
        None => {}
    }
    let c = &plan.cell;
    if let Some(m) = c.random_misset_rad {
        out.push(format!(
            "random orientation misset angles: {} {} {} deg",
            cf(m[0] * RTD, 6),
            cf(m[1] * RTD, 6),
            cf(m[2] * RTD, 6)
        ));
    }
    for (label, v) in [("Unit Cell", c.cell), ("Recp Cell", c.recip_cell)] {
        out.push(format!("{label}: {}", v.map(g).join(" ")));
    }
    out.push(format!("volume = {} A^3", g(c.volume_a3)));
    let (a, b, cc) = (c.a_m.map(|x| x * 1e10), c.b_m.map(|x| x * 1e10), c.c_m.map(|x| x * 1e10));
    out.push("real-space cell vectors (Angstrom):".into());
    out.push(format!("     {:<10}  {:<10}  {:<10}", "a", "b", "c"));
    for (i, axis) in ["X", "Y", "Z"].iter().enumerate() {
        out.push(format!(
            "{axis}: {} {} {}",
            f_width(a[i], 11, 8),
            f_width(b[i], 11, 8),
            f_width(cc[i], 11, 8)
        ));
    }
    out.push("reciprocal-space cell vectors (Angstrom^-1):".into());
    out.push(format!("     {:<10}  {:<10}  {:<10}", "a_star", "b_star", "c_star"));
    for (i, axis) in ["X", "Y", "Z"].iter().enumerate() {
        out.push(format!(
            "{axis}: {} {} {}",
            f_width(c.a_star[i], 11, 8),
            f_width(c.b_star[i], 11, 8),
            f_width(c.c_star[i], 11, 8)
        ));
    }
    let x = plan.xtal_size_m;
    out.push(format!(
        "crystal is {} x {} x {} microns",
        g(x[0] * 1e6),
        g(x[1] * 1e6),
        g(x[2] * 1e6)
    ));
    if plan.oversample_auto {
        out.push(format!("auto-selected {}-fold oversampling", plan.oversample));
    }
    for w in &plan.warnings {
        if matches!(w, Warning::Undersampled(..)) {
            out.push(warning_text(w));
        }
    }
    out.push(format!("approximate MW = {}", g(plan.approx_mw)));
}

/// Sensor layers, phi steps, sources and domains, written to `out` line by
/// line (there can be millions: none is kept).
pub fn sampling_lines(plan: &Plan, out: &mut impl Write) -> std::io::Result<()> {
    let d = &plan.detector;
    for t in 0..d.thicksteps {
        writeln!(out, "thick{t} = {} um", g(d.thickstep_m * t as f64 * 1e6))?;
    }
    for p in 0..plan.phisteps {
        let phi = plan.phi0_rad + plan.phistep_rad * p as f64;
        writeln!(out, "phi{p} = {}", g(phi * RTD))?;
    }
    let s = &plan.sources;
    for (h, v) in &s.div_points {
        writeln!(out, "divergence deviation: {} {}", g(*h), g(*v))?;
    }
    for (i, l) in s.lambdas.iter().enumerate() {
        writeln!(out, "lambda{i} = {}", nanobragg_io::cfmt::g_prec(*l, 15))?;
    }
    writeln!(out, "  created a total of {} sources:", s.list.len())?;
    for src in &s.list {
        writeln!(out, "{}   {} {}", v3(src.position), g(src.weight), g(src.lambda_m))?;
    }
    writeln!(out, "  created a total of {} mosaic domains", plan.mosaic_domains())
}

/// The summary block printed just before rendering.
/// `dials_frame`: the laboratory frame is DIALS's (`-expt`, `-geom`), where
/// the DIALS origin is the first pixel's corner itself; otherwise nanoBragg.c's
/// mapping of the MOSFLM frame.
pub fn summary_lines(
    plan: &Plan,
    mask_name: Option<&str>,
    dials_frame: bool,
    out: &mut Vec<String>,
) {
    let d = &plan.detector;
    let s = &plan.sources;
    let hkls_line = format!("  {} initialized hkls (all others ={})", plan.hkls, g(plan.default_f));
    out.push(hkls_line);
    let shape = match plan.shape {
        CrystalShape::Round => "ellipsoidal",
        CrystalShape::Square => "parallelpiped",
        CrystalShape::Gauss => "gaussian",
        CrystalShape::Tophat => "tophat-spot",
    };
    let n = plan.n_cells;
    out.push(format!("  {shape} xtal: {}x{}x{} cells", cf(n[0], 0), cf(n[1], 0), cf(n[2], 0)));
    if s.spectrum {
        let (lo, hi) =
            s.lambdas.iter().fold((f64::MAX, f64::MIN), |(a, b), &l| (a.min(l), b.max(l)));
        out.push(format!(
            "  spectrum: {} wavelengths from {} to {} meters, weighted mean {} meters",
            s.dispsteps,
            g(lo),
            g(hi),
            g(s.central_lambda_m)
        ));
    } else {
        out.push(format!(
            "  wave={} meters +/- {}% in {} steps",
            g(plan.sources.central_lambda_m),
            g(s.dispersion * 100.0),
            s.dispsteps
        ));
    }
    if s.from_file && s.weighted {
        out.push("  source weights applied (-corrected)".into());
    }
    if plan.nopolar {
        out.push("  polarization effect disabled".into());
    } else {
        out.push(format!("  Kahn polarization factor: {}", cf(plan.kahn_factor, 6)));
    }
    if d.curved {
        out.push("  curved detector: all pixels same distance from origin".into());
    }
    if d.point_pixel {
        out.push("  pixel obliquity effect disabled".into());
    }
    out.push(format!("  incident fluence: {} photons/m^2", g(plan.fluence)));
    out.push(format!(
        "  distance={} detsize={}x{}  pixel={} meters ({}x{} pixels)",
        g(d.distance_m),
        g(d.detsize_f_m),
        g(d.detsize_s_m),
        g(d.pixel_size_m),
        d.fpixels,
        d.spixels
    ));
    out.push(format!(
        "  sensor is {} m thick in {} layers with mu= {}",
        g(d.thick_m),
        d.thicksteps,
        g(d.mu_per_m)
    ));
    out.push(format!("  Xbeam={} Ybeam={}", g(d.xbeam_m), g(d.ybeam_m)));
    out.push(format!("  Fbeam={} Sbeam={}", g(d.fbeam_m), g(d.sbeam_m)));
    out.push(format!("  Xclose={} Yclose={}", g(d.xclose_m), g(d.yclose_m)));
    out.push(format!("  Fclose={} Sclose={}", g(d.fclose_m), g(d.sclose_m)));
    out.push(format!("  DIRECTION_OF_DETECTOR_X-AXIS= {}", v3(d.fdet)));
    out.push(format!("  DIRECTION_OF_DETECTOR_Y-AXIS= {}", v3(d.sdet)));
    out.push(format!("  DIRECTION_OF_DETECTOR_Z-AXIS= {}", v3(d.odet)));
    out.push(format!("  INCIDENT_BEAM_DIRECTION= {}", v3(d.beam)));
    out.push(format!("  spindle ROTATION_AXIS= {}", v3(d.spindle)));
    out.push(format!(
        "  POLARIZATION_PLANE_NORMAL= {}",
        v3(nanobragg_core::vec3::cross(d.beam, d.polar))
    ));
    let origin = if dials_frame { d.pix0.map(|x| 1000.0 * x) } else { d.dials_origin_mm };
    out.push(format!("  dials origin= {}", v3(origin)));
    let roi = d.roi;
    out.push(format!("  roi: {} < x < {} && {} < y < {}", roi[0], roi[1], roi[2], roi[3]));
    out.push(format!("  hdivrange={} hdivstep={}  radians", g(s.hdivrange), g(s.hdivstep)));
    out.push(format!("  vdivrange={} vdivstep={}  radians", g(s.vdivrange), g(s.vdivstep)));
    out.push(format!("  {} divergence steps", s.divsteps));
    out.push(format!("  {} sources", s.list.len()));
    out.push(format!(
        "  {} mosaic domains over mosaic spread of {} degrees",
        plan.mosaic_domains(),
        g(plan.mosaic_spread_rad * RTD)
    ));
    out.push(format!(
        "  {} phi steps from {} to {} degrees",
        plan.phisteps,
        g(plan.phi0_rad * RTD),
        g((plan.phi0_rad + plan.osc_rad) * RTD)
    ));
    let mut os = format!("  {}x{} pixel oversample steps", plan.oversample, plan.oversample);
    if plan.oversample_thick {
        os.push_str(" +thick");
    }
    if plan.oversample_polar {
        os.push_str(" +polar");
    }
    if plan.oversample_omega {
        os.push_str(" +omega");
    }
    out.push(os);
    if let Some(m) = mask_name {
        out.push(format!("  skipping zero-flagged pixels in {m}"));
    }
    let _ = Convention::Mosflm;
}

/// The warning nanoBragg.c prints (once) when tricubic interpolation leaves the
/// structure factor grid; like the C program it ends without a newline.
pub fn interpolation_warning(hkl: [f64; 3], hkl0: [i64; 3]) -> String {
    format!(
        "WARNING: out of range for three point interpolation: h,k,l,h0,k0,l0: {},{},{},{},{},{} \nWARNING: further warnings will not be printed! ",
        g(hkl[0]),
        g(hkl[1]),
        g(hkl[2]),
        hkl0[0],
        hkl0[1],
        hkl0[2]
    )
}

/// The lines `-printout` prints for one pixel, in the C program's formats;
/// `pixel` is the value stored in the float image.
pub fn trace_text(t: &PixelTrace, pixel: f32) -> String {
    use nanobragg_io::cfmt::{g_width, pad_right};
    let g15 = |x: f64| g_width(x, 15, 10);
    let row = |i: usize| {
        let [a, b, c] = t.cell_m;
        format!(
            "{} {} {}",
            f_width(a[i] * 1e10, 11, 8),
            f_width(b[i] * 1e10, 11, 8),
            f_width(c[i] * 1e10, 11, 8)
        )
    };
    let [h, k, l] = t.hkl;
    let [h0, k0, l0] = t.hkl0;
    let p = t.position;
    format!(
        "{:>4} {:>4} : stol = {} or {}\n\
         at {} {} {}\n\
         hkl= {} {} {}  hkl0= {h0} {k0} {l0}\n \
         F_cell={}  F_latt={}   I = {}\n\
         I/steps {}\n\
         polar   {}\n\
         omega   {}\n\
         capfrac {}\n\
         pixel   {}\n\
         real-space cell vectors (Angstrom):\n     {}  {}  {}\n\
         X: {}\nY: {}\nZ: {}\n",
        t.fpixel,
        t.spixel,
        g(t.stol),
        g(t.stol_geometric),
        g(p[0]),
        g(p[1]),
        g(p[2]),
        cf(h, 6),
        cf(k, 6),
        cf(l, 6),
        g(t.f_cell),
        g(t.f_latt),
        g(t.i),
        g15(t.i / t.steps),
        g15(t.polar),
        g15(t.omega),
        g15(t.capture_fraction),
        g15(pixel as f64),
        pad_right("a", 10),
        pad_right("b", 10),
        pad_right("c", 10),
        row(0),
        row(1),
        row(2)
    )
}

/// Prints the setup report (writing the Fdump file where nanoBragg.c does),
/// each line as it comes: the per-step lines (one per sensor layer, phi
/// step, wavelength and source) are never held in memory together.
pub(crate) fn setup(
    out: &mut impl Write,
    plan: &Plan,
    inv: &Invocation,
    noise_idum: i64,
) -> Result<()> {
    let mut lines = Vec::new();
    for w in &plan.warnings {
        if !matches!(w, nanobragg_core::error::Warning::Undersampled(..)) {
            lines.push(warning_text(w));
        }
    }
    lines.push("nanobragg nanocrystal diffraction simulator (Rust port of nanoBragg by James Holton and Ken Frankel)".into());
    setup_lines(plan, &mut lines);

    // structure factors: report reading and keep the dump for next time, as C does
    match &inv.config.sf.source {
        SfSource::Dump(_) => {
            lines.push(format!("reading Fs from {}", inv.outputs.dumpfile.display()))
        }
        SfSource::Hkl(entries) if inv.model_path.is_some() => {
            let model =
                inv.model_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            lines.push(format!(
                "{} structure factors summed from the atoms of {model}",
                entries.len()
            ));
            if let Some(grid) = &plan.grid {
                print_lines(out, &mut lines)?;
                write_dump(out, &inv.outputs.dumpfile, grid)?;
            }
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
    sampling_lines(plan, out)?;
    let mask = inv.mask_path.as_ref().map(|p| p.to_str().unwrap_or("mask"));
    summary_lines(plan, mask, !inv.detector_files.is_empty(), &mut lines);
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

/// The line nanoBragg.c prints of the solid angle the samples saw
/// (`omega_sum` over `steps` samples per pixel).
pub(crate) fn solid_angle_line(out: &mut impl Write, omega_sum: f64, steps: usize) -> Result<()> {
    let steps = steps as f64;
    writeln!(
        out,
        "solid angle subtended by detector = {} steradian ( {}% sphere)",
        g(omega_sum / steps),
        g(100.0 * omega_sum / steps / 4.0 / std::f64::consts::PI)
    )?;
    Ok(())
}
