//! One nanoBragg run: plan, render, report, write outputs.

use crate::parse::{Dtype, Invocation};
use crate::report;
use anyhow::{Context, Result};
use nanobragg_core::config::SfSource;
use nanobragg_core::render::{cpu, RenderOptions};
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::sf::fdump::write_fdump;
use nanobragg_core::stats::image_stats;
use nanobragg_io::cfmt::g;
use nanobragg_io::smv::SmvHeaderFields;
use std::io::Write;

fn clock_seed() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Execute a parsed command line.
pub fn run(inv: Invocation) -> Result<()> {
    if inv.help {
        print!("{}", crate::flags::help_text());
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for w in &inv.warnings {
        eprintln!("warning: {w}");
    }
    let clock = clock_seed();
    // nanoBragg.c keeps seeds negated; an absent -seed/-misset_seed means the clock
    let noise_idum = -inv.seed.unwrap_or(clock);
    let misset_idum = match inv.config.crystal.misset_seed {
        Some(s) => -s,
        None => -clock,
    };
    let plan = Plan::new(&inv.config, SetupSeeds { misset_idum })?;

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

    let opts = RenderOptions { threads: inv.threads };
    let rendered = match inv.dtype {
        Dtype::Float64 => cpu::render(&plan, opts),
        Dtype::Float32 => cpu::render_as::<f32>(&plan, opts),
    };
    if let Some((hkl, hkl0)) = rendered.interpolation_fallback {
        write!(
            out,
            "WARNING: out of range for three point interpolation: h,k,l,h0,k0,l0: {},{},{},{},{},{} \nWARNING: further warnings will not be printed! ",
            g(hkl[0]),
            g(hkl[1]),
            g(hkl[2]),
            hkl0[0],
            hkl0[1],
            hkl0[2]
        )?;
    }
    writeln!(out)?;
    let steps = plan.steps as f64;
    writeln!(
        out,
        "solid angle subtended by detector = {} steradian ( {}% sphere)",
        g(rendered.omega_sum / steps),
        g(100.0 * rendered.omega_sum / steps / 4.0 / std::f64::consts::PI)
    )?;

    let d = &plan.detector;
    let (fp, sp) = (d.fpixels, d.spixels);
    let mask = plan.mask.as_deref();
    let roi = d.roi;
    let in_roi = |f: usize, s: usize| {
        let (fi, si) = (f as i64, s as i64);
        !(fi < roi[0] || fi > roi[1] || si < roi[2] || si > roi[3])
    };
    let stats = image_stats(&rendered.image, fp, roi, |f, s| {
        in_roi(f, s) && mask.is_none_or(|m| m[s * fp + f] != 0)
    });
    let image = &rendered.image;

    writeln!(out, "writing {} as {} 4-byte floats", inv.outputs.floatfile.display(), fp * sp)?;
    nanobragg_io::float::write_float_image(&inv.outputs.floatfile, image)
        .with_context(|| format!("writing -floatfile {}", inv.outputs.floatfile.display()))?;

    let subpixel = d.pixel_size_m / plan.oversample as f64;
    let last = (plan.oversample - 1) as f64;
    let max_x = subpixel * (stats.max_f as f64 * plan.oversample as f64 + last) + subpixel / 2.0;
    let max_y = subpixel * (stats.max_s as f64 * plan.oversample as f64 + last) + subpixel / 2.0;
    let (max_x, max_y) =
        if stats.count == 0 || stats.max_i <= 0.0 { (0.0, 0.0) } else { (max_x, max_y) };
    writeln!(out, "max_I = {}  at {} {}", g(stats.max_i), g(max_x), g(max_y))?;
    writeln!(out, "mean= {} rms= {} rmsd= {}", g(stats.mean), g(stats.rms), g(stats.rmsd))?;
    let mut int_scale = inv.outputs.int_scale;
    if int_scale <= 0.0 {
        int_scale = 1.0;
        if stats.max_i > 0.0 {
            int_scale = 55000.0 / stats.max_i;
        }
    }
    writeln!(out, "intfile_scale = {}", g(int_scale))?;
    let header = SmvHeaderFields {
        fpixels: fp,
        spixels: sp,
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
    };
    let ints = nanobragg_io::pgm::int_image(image, fp, sp, roi, int_scale, inv.outputs.adc_offset);
    writeln!(out, "writing {} as 2-byte integers", inv.outputs.intfile.display())?;
    nanobragg_io::smv::write_smv(&inv.outputs.intfile, &header, &ints)
        .with_context(|| format!("writing -intfile {}", inv.outputs.intfile.display()))?;

    if inv.outputs.write_pgm {
        let mut pgm_scale = inv.outputs.pgm_scale;
        if pgm_scale <= 0.0 {
            pgm_scale = int_scale;
            if stats.rmsd > 0.0 {
                pgm_scale = 250.0 / (5.0 * stats.rmsd);
            }
        }
        writeln!(out, "pgm_scale = {}", g(pgm_scale))?;
        let bytes = nanobragg_io::pgm::pgm_bytes(image, fp, sp, roi, pgm_scale);
        writeln!(out, "writing {} as 1-byte integers", inv.outputs.pgmfile.display())?;
        nanobragg_io::pgm::write_pgm(&inv.outputs.pgmfile, fp, sp, pgm_scale, &bytes)
            .with_context(|| format!("writing -pgmfile {}", inv.outputs.pgmfile.display()))?;
    }

    if inv.outputs.calculate_noise {
        let mut rng = NoiseRng::new(noise_idum);
        let noise = nanobragg_core::noise::noise_image(
            image,
            fp,
            sp,
            roi,
            inv.outputs.adc_offset,
            &mut rng,
        );
        writeln!(
            out,
            "{} photons on noise image ({} overloads)",
            nanobragg_io::cfmt::f(noise.photons, 0),
            noise.overloads
        )?;
        writeln!(out, "writing {} as 2-byte integers", inv.outputs.noisefile.display())?;
        nanobragg_io::smv::write_smv(&inv.outputs.noisefile, &header, &noise.pixels)
            .with_context(|| format!("writing -noisefile {}", inv.outputs.noisefile.display()))?;
    }
    out.flush()?;
    Ok(())
}
