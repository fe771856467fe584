//! `-printout`: the trace of each requested pixel (every rendered pixel
//! without `-printout_pixel`), with the interpolation warning where
//! nanoBragg.c prints it among them.

use crate::invocation::Invocation;
use crate::panels::PanelRun;
use crate::report;
use anyhow::Result;
use nanobragg_core::render::trace::{interpolation_cutoff, trace_pixel, trace_range};
use nanobragg_core::render::RenderInfo;
use nanobragg_core::setup::Plan;
use std::io::Write;

/// Prints the `-printout` trace of the requested pixels (every rendered pixel
/// when no `-printout_pixel` or a negative fast index is given), and the
/// interpolation warning where nanoBragg.c prints it among them (without
/// `-printout`: the warning alone).
pub(crate) fn traces(
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

/// `-printout` of panel `k` of a multi-panel run: its pixels' traces (or
/// that of `-printout_pixel`, given in the whole image, where it falls on
/// this panel), with the whole image's pixel indices.
/// `fallback`: where the panel's tricubic interpolation left the grid.
pub(crate) fn panel_traces(
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
