//! The detector response of a render's noise image: noisify's options
//! (gain, read-out, flicker and calibration noise, point-spread function,
//! bits) given to a render or a dataset, and the lines noisify.c prints of
//! its point-spread function.

use crate::invocation::Outputs;
use anyhow::{bail, Result};
use nanobragg_core::response::{Bits, Response};
use nanobragg_io::cfmt::g;
use std::io::Write;

/// noisify's calibration seed word when none is given (it acts as seed 1).
pub const NOISIFY_CALIB_IDUM: i64 = 123456789;

/// The noise image's detector response (noisify's options), `None` when no
/// option asks for one; options that need another one are refused.
pub fn response(o: &Outputs, pixel_size_m: f64) -> Result<Option<Response>> {
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

/// The lines the reference's `apply_psf` prints.
pub fn report_psf(a: &nanobragg_core::psf::PsfApplied, out: &mut impl Write) -> Result<()> {
    if a.zero_width {
        writeln!(out, "WARNING: apply_psf function has zero size")?;
        return Ok(());
    }
    if let Some(max) = a.max_input {
        writeln!(out, "  maximum input photon/pixel: {}", g(max))?;
    }
    match (a.lost_photons, a.auto_radius) {
        (None, _) => writeln!(out, "WARNING: no photons, PSF skipped")?,
        (Some(lost), auto) => {
            if let Some(r) = auto {
                writeln!(out, "  auto-selected psf_radius = {r} pixels")?;
            }
            writeln!(out, "adding back {} lost photons", g(lost))?;
        }
    }
    Ok(())
}
