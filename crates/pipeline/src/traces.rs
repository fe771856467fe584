//! `-printout`: the trace of each requested pixel (every rendered pixel
//! without `-printout_pixel`), with the interpolation warning where
//! nanoBragg.c prints it among them.

use crate::invocation::Invocation;
use crate::report;
use anyhow::Result;
use nanobragg_core::render::trace::{interpolation_cutoff, trace_pixel, trace_range, PixelTrace};
use nanobragg_core::Experiment;
use std::io::Write;

/// Prints the `-printout` trace of the requested pixels of panel `k` of
/// `exp` (every rendered pixel when no `-printout_pixel` or a negative fast
/// index is given; `-printout_pixel` is a pixel of the whole image, traced
/// by the panel it falls on), with the whole image's pixel indices, and the
/// panel's interpolation warning `fallback` where nanoBragg.c prints it
/// among them (without `-printout`: the warning alone).
pub(crate) fn traces(
    out: &mut impl Write,
    exp: &Experiment,
    k: usize,
    inv: &Invocation,
    image: &[f32],
    fallback: Option<([f64; 3], [i64; 3])>,
) -> Result<()> {
    if !inv.printout {
        if let Some((hkl, hkl0)) = fallback {
            write!(out, "{}", report::interpolation_warning(hkl, hkl0))?;
        }
        return Ok(());
    }
    let (plan, [x0, y0], [fp, sp]) = (&exp.plans[k], exp.layout.origins[k], exp.layout.sizes[k]);
    let width = exp.layout.width;
    // the first pixel whose evaluation left the grid: pixels after it start
    // without interpolation, and the warning is printed during it
    let cutoff = fallback.and_then(|_| interpolation_cutoff(plan));
    let warning = fallback.map(|(h, h0)| report::interpolation_warning(h, h0));
    let mut warned = warning.is_none();
    let mut warn_before = |out: &mut dyn Write, idx: usize| -> std::io::Result<()> {
        if !warned && cutoff.is_some_and(|c| c <= idx) {
            warned = true;
            write!(out, "{}", warning.as_deref().unwrap_or_default())?;
        }
        Ok(())
    };
    let show = |out: &mut dyn Write, mut t: PixelTrace| {
        (t.fpixel, t.spixel) = (t.fpixel + x0, t.spixel + y0);
        write!(out, "{}", report::trace_text(&t, image[t.spixel * width + t.fpixel]))
    };
    match inv.printout_pixel {
        Some((f, s)) if f >= 0 => {
            // (a pixel on no panel is the caller's to report)
            if let Some((f, s)) = exp.on_panel(k, f, s) {
                let idx = s * fp + f;
                let start_on = plan.interpolation == nanobragg_core::setup::Interpolation::Tricubic;
                let mut interp = start_on && cutoff.is_none_or(|c| idx <= c);
                match trace_pixel(plan, f, s, &mut interp) {
                    Some(t) => {
                        warn_before(out, idx)?;
                        show(out, t)?;
                    }
                    None => eprintln!(
                        "warning: -printout_pixel {} {}: that pixel is not rendered (outside -roi or masked)",
                        f + x0,
                        s + y0
                    ),
                }
            }
        }
        Some(_) | None => {
            // every pixel, a few rows at a time
            let rows = (65536 / fp.max(1)).max(1);
            for first in (0..sp).step_by(rows) {
                let range = first * fp..((first + rows).min(sp)) * fp;
                for t in trace_range(plan, range, cutoff) {
                    warn_before(out, t.spixel * fp + t.fpixel)?;
                    show(out, t)?;
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

/// Warns of a `-printout_pixel` on no panel of `exp`'s image.
pub(crate) fn check_printout_pixel(exp: &Experiment, inv: &Invocation) {
    let Some((f, s)) = inv.printout_pixel.filter(|p| p.0 >= 0 && inv.printout) else { return };
    if (0..exp.plans.len()).all(|k| exp.on_panel(k, f, s).is_none()) {
        let (w, h) = (exp.layout.width, exp.layout.height);
        eprintln!(
            "warning: -printout_pixel {f} {s}: that pixel is not on the detector (a {w} x {h} pixel image)"
        );
    }
}
